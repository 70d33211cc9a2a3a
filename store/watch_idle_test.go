package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// CloseIdleWatches closes, with ACK_TIMEOUT, the watches whose client sent no request naming them
// within the bound, and only those. A request names a watch when its principal and id are the
// watch's: its own watch request, or an ack of any sequence, taken or refused INVALID_ARGUMENT. An ack
// of another principal's watch with the same id, or of an unknown id, refreshes nothing. A closed
// watch is gone: an ack of it is NOT_FOUND, and its id is free again.
func TestCloseIdleWatchesNamesOnlyTheSilentOnes(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	_, silent := watchT(t, s, alice, "w", "user/alice", "")    // nothing names it after its watch
	_, prober := watchT(t, s, bob, "w", "user/bob", "")        // refused probes only
	_, acker := watchT(t, s, admin, "acker", "service/tx", "") // takes an update and acks it
	// Every registration happened an hour ago, as the registry sees it.
	s.watches.mu.Lock()
	for _, w := range s.watches.byID {
		w.seen -= int64(time.Hour)
	}
	s.watches.mu.Unlock()
	_, fresh := watchT(t, s, admin, "fresh", "service/tx", "") // its watch request is its last word

	seq := func(n uint64) *int64 { v := int64(n); return &v }
	// bob's probe, one past the highest sent: refused, and it counts.
	if err := s.Ack(ctx, bob, wire.AckRequest{WatchID: "w", AppliedSequence: seq(1)}); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("probe ack: %v, want INVALID_ARGUMENT", err)
	}
	// alice's unknown id names nothing of hers (bob's ack of "w" above named his watch, not hers).
	if err := s.Ack(ctx, alice, wire.AckRequest{WatchID: "other", AppliedSequence: seq(0)}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack of an unknown id: %v, want NOT_FOUND", err)
	}
	mustPut(t, s, admin, putLease("service/tx", "k"))
	for _, ch := range []chan Message{acker, fresh} {
		if m := recv(t, ch); m.Sequence != 1 {
			t.Fatalf("update %+v, want sequence 1", m)
		}
	}
	if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "acker", AppliedSequence: seq(1)}); err != nil {
		t.Fatalf("ack: %v", err)
	}

	closed := s.CloseIdleWatches(time.Minute)
	if len(closed) != 1 || closed[0].Principal != "alice" || closed[0].WatchID != "w" {
		t.Fatalf("closed %+v, want alice's w only", closed)
	}
	wantClosed(t, silent, wire.CloseAckTimeout)
	noMessage(t, silent)
	for _, ch := range []chan Message{prober, acker, fresh} {
		noMessage(t, ch)
	}
	if err := s.Ack(ctx, alice, wire.AckRequest{WatchID: "w", AppliedSequence: seq(0)}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack of the closed watch: %v, want NOT_FOUND", err)
	}
	live := s.LiveWatches()
	ids := make([]string, 0, len(live))
	for _, r := range live {
		ids = append(ids, r.Principal+"/"+r.WatchID)
	}
	slices.Sort(ids)
	if want := []string{"bob/w", "coordinator/acker", "coordinator/fresh"}; !slices.Equal(ids, want) {
		t.Fatalf("live watches %q, want %q", ids, want)
	}
	// Its id is free again.
	watchT(t, s, alice, "w", "user/alice", "")
	// A second look closes nothing more: what was named within the bound stays.
	if closed := s.CloseIdleWatches(time.Minute); len(closed) != 0 {
		t.Fatalf("a second look closed %+v", closed)
	}
}
