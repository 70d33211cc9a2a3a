package stated

import (
	"context"
	"fmt"
	"reflect"

	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// changedBounds names each bound that differs between was and will, with both values
// ("max_pending_updates 32 -> 16"), in the order of wire.Bounds.
func changedBounds(was, will wire.Bounds) []string {
	var out []string
	a, b := reflect.ValueOf(was), reflect.ValueOf(will)
	for i := range a.NumField() {
		if x, y := a.Field(i).Int(), b.Field(i).Int(); x != y {
			out = append(out, fmt.Sprintf("%s %d -> %d", a.Type().Field(i).Tag.Get("toml"), x, y))
		}
	}
	return out
}

// scanPrincipal reads every namespace to measure the documents the store holds.
var scanPrincipal = policy.Principal{ID: "stated", Admin: true}

// boundsBelowUsage reports what the store holds beyond bounds b: the counts and bytes that the start
// validates (SPEC section 10), where a store over its bounds is not served, every operation answering
// UNAVAILABLE. A SIGHUP whose bounds take effect at the next restart therefore refuses those: the
// restart would not serve the store. The documents are read only when max_document_bytes is lowered
// from was, the bounds in force. A store that is not served holds nothing to compare.
func boundsBelowUsage(ctx context.Context, st *store.Store, was, b wire.Bounds) error {
	if st.Serving() != nil {
		return nil
	}
	stats := st.Stats()
	if stats.TotalBytes > b.MaxTotalValueBytes {
		return fmt.Errorf("the store holds %d bytes of documents, over max_total_value_bytes %d", stats.TotalBytes, b.MaxTotalValueBytes)
	}
	if stats.LiveNamespaces > b.MaxNamespaces {
		return fmt.Errorf("%d namespaces hold entries, over max_namespaces %d", stats.LiveNamespaces, b.MaxNamespaces)
	}
	for _, ns := range stats.PerNamespace {
		if int64(ns.Entries) > b.MaxEntriesPerNamespace {
			return fmt.Errorf("namespace %q holds %d entries, over max_entries_per_namespace %d", ns.Namespace, ns.Entries, b.MaxEntriesPerNamespace)
		}
	}
	if b.MaxDocumentBytes >= was.MaxDocumentBytes {
		return nil
	}
	for _, ns := range stats.PerNamespace {
		if ns.Entries == 0 {
			continue
		}
		req := wire.ListRequest{Namespace: ns.Namespace}
		for {
			page, err := st.List(ctx, scanPrincipal, req)
			if err != nil {
				return fmt.Errorf("namespace %q: %w", ns.Namespace, err)
			}
			for _, e := range page.Entries {
				if n := int64(len(e.Document)); n > b.MaxDocumentBytes {
					return fmt.Errorf("entry %s:%s holds a document of %d bytes, over max_document_bytes %d", e.Namespace, e.Key, n, b.MaxDocumentBytes)
				}
			}
			if page.NextAfterKey == "" {
				break
			}
			req.AfterKey = page.NextAfterKey
		}
	}
	return nil
}
