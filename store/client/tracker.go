package client

import (
	"fmt"
	"strings"

	"github.com/keeppeek/coordination/store/wire"
)

// verdict is what the tracker makes of one watch message.
type verdict int

const (
	// apply: the next update of this watch, well formed; apply it.
	apply verdict = iota
	// skip: a leftover of the watch's previous incarnation (same watch id, delivered before this
	// incarnation's first update, at or below its snapshot revision); not ours, ignore it.
	skip
	// resync: a gap, a close or a message that makes no sense; watch again.
	resync
)

// tracker is the pure sequence logic of SPEC section 7.4 for one incarnation of a watch: it accepts
// an update only when its watch_sequence is exactly one above the last applied and it is consistent
// with the watch (namespace, prefix, increasing revision, a PUT's entry matching its key and
// revision).
type tracker struct {
	watchID   string
	namespace string
	prefix    string
	seq       uint64 // highest applied watch_sequence; 0 right after the snapshot
	rev       uint64 // snapshot_revision, then the revision of the last applied update
}

// newTracker starts tracking the incarnation whose snapshot is ws.
func newTracker(ws *wire.WatchState) tracker {
	return tracker{watchID: ws.WatchID, namespace: ws.Namespace, prefix: ws.KeyPrefix, rev: ws.SnapshotRevision}
}

// checkSnapshot reports an entry of ws that cannot belong to it.
func checkSnapshot(ws *wire.WatchState) error {
	prev := ""
	for i, e := range ws.Entries {
		switch {
		case e.Namespace != ws.Namespace:
			return fmt.Errorf("snapshot entry %s is not in namespace %s", e.String(), ws.Namespace)
		case !strings.HasPrefix(e.Key, ws.KeyPrefix):
			return fmt.Errorf("snapshot entry %s is outside prefix %q", e.String(), ws.KeyPrefix)
		case e.Revision > ws.SnapshotRevision:
			return fmt.Errorf("snapshot entry %s is newer than snapshot_revision %d", e.String(), ws.SnapshotRevision)
		case i > 0 && e.Key <= prev:
			return fmt.Errorf("snapshot entry %s is out of key order or repeated", e.String())
		}
		prev = e.Key
	}
	return nil
}

// check classifies m (already decoded by decodeWatchMessage) and, for an update to apply, advances
// the tracker. The error says why a resync is needed.
func (t *tracker) check(m *wire.WatchMessage) (verdict, error) {
	if m.WatchID != t.watchID {
		return resync, fmt.Errorf("message names watch %q, expected %q", m.WatchID, t.watchID)
	}
	switch m.Kind {
	case wire.UpdateClosed:
		return resync, fmt.Errorf("watch closed: %s: %s", m.Reason, m.Message)
	case wire.UpdatePut, wire.UpdateDelete, wire.UpdateExpire:
	default:
		return resync, fmt.Errorf("message of unknown kind %q", m.Kind)
	}
	if t.seq == 0 && m.Revision <= t.rev {
		return skip, nil
	}
	if m.WatchSequence != t.seq+1 {
		return resync, fmt.Errorf("sequence gap: got watch_sequence %d after %d", m.WatchSequence, t.seq)
	}
	if m.Revision <= t.rev {
		return resync, fmt.Errorf("update %d has revision %d, not above %d", m.WatchSequence, m.Revision, t.rev)
	}
	if !strings.HasPrefix(m.Key, t.prefix) {
		return resync, fmt.Errorf("update %d key %q is outside prefix %q", m.WatchSequence, m.Key, t.prefix)
	}
	if m.Kind == wire.UpdatePut {
		e := m.Entry
		if e == nil || e.Key != m.Key || e.Namespace != t.namespace || e.Revision != m.Revision {
			return resync, fmt.Errorf("PUT update %d carries an entry that does not match key %q in %s at revision %d",
				m.WatchSequence, m.Key, t.namespace, m.Revision)
		}
	} else if m.Entry != nil {
		return resync, fmt.Errorf("%s update %d carries an entry", m.Kind, m.WatchSequence)
	}
	t.seq, t.rev = m.WatchSequence, m.Revision
	return apply, nil
}
