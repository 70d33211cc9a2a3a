package internal

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// StatusKey is the key of an intent's observed status: status/ and the intent key without intents/.
func StatusKey(intentKey string) string {
	return "status/" + strings.TrimPrefix(intentKey, "intents/")
}

// Settled is the revision of an unwanted intent (withdrawn, invalid, no longer a worker's kind) at
// which a worker found the store holding nothing a gone holder left for it, in the store's epoch: a
// worker looks once per revision, not at every resync. A revision means something only in its epoch:
// a store restored from a backup may hold the same intent at the same revision next to the status of
// a gone holder that the old epoch's look ended.
type Settled struct {
	Epoch    string
	Revision uint64
}

// ReadStatus reads the observed status of the intent intentKey in ns. ok is false when there is none
// (or the entry is no status); an error says the store could not be read, which says nothing.
func ReadStatus(ctx context.Context, c *client.Client, ns, intentKey string) (st reconciler.ObservedStatus, rev uint64, ok bool, err error) {
	e, err := c.Get(ctx, ns, StatusKey(intentKey))
	if errors.Is(err, wire.ErrNotFound) {
		return st, 0, false, nil
	}
	if err != nil {
		return st, 0, false, err
	}
	if e.Schema != reconciler.ObservedStatusSchema || json.Unmarshal(e.Document, &st) != nil {
		return st, 0, false, nil
	}
	return st, e.Revision, true, nil
}

// SweepStatuses enqueues, once, the intent of every status in ns that left says a worker left behind
// (a gone holder's subscription, say): a worker's cache holds only the intents that exist, and a
// holder killed before it saw its intent deleted left words and media that nobody would look at
// again. The store is read again every retry until it answers, or ctx ends (nil then).
func SweepStatuses(ctx context.Context, c *client.Client, ns string, left func(reconciler.ObservedStatus) bool,
	enqueue func(intentKey string), retry time.Duration, log *slog.Logger) error {
	for {
		keys, err := statusIntents(ctx, c, ns, left)
		if err == nil {
			for _, k := range keys {
				enqueue(k)
			}
			return nil
		}
		log.Debug("statuses not listed", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// statusIntents returns the intent keys of the statuses in ns that keep says yes to, every page.
func statusIntents(ctx context.Context, c *client.Client, ns string, keep func(reconciler.ObservedStatus) bool) ([]string, error) {
	var keys []string
	after := ""
	for {
		page, err := c.List(ctx, wire.ListRequest{Namespace: ns, KeyPrefix: "status/", AfterKey: after, Limit: 256})
		if err != nil {
			return nil, err
		}
		for _, e := range page.Entries {
			var st reconciler.ObservedStatus
			if e.Schema == reconciler.ObservedStatusSchema && json.Unmarshal(e.Document, &st) == nil && keep(st) {
				keys = append(keys, "intents/"+strings.TrimPrefix(e.Key, "status/"))
			}
		}
		if page.NextAfterKey == "" {
			return keys, nil
		}
		after = page.NextAfterKey
	}
}
