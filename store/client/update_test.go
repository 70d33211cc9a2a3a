package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// appendToken returns an Update merge function that appends token to a preference's layout, a
// space-separated list.
func appendToken(ns, key, token string, calls *int) func(cur *wire.Entry) (*wire.PutRequest, error) {
	return func(cur *wire.Entry) (*wire.PutRequest, error) {
		if calls != nil {
			*calls++
		}
		layout := token
		if cur != nil {
			var d struct {
				Layout string `json:"layout"`
			}
			if err := json.Unmarshal(cur.Document, &d); err != nil {
				return nil, err
			}
			layout = strings.TrimSpace(d.Layout + " " + token)
		}
		req := preference(ns, key, layout)
		return &req, nil
	}
}

func TestUpdateCreatesMergesAndSkips(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	var calls int
	e1, err := c.Update(ctx, ns, "list", appendToken(ns, "list", "a", &calls))
	if err != nil || e1.Revision != 1 || layoutOf(t, e1) != "a" || calls != 1 {
		t.Fatalf("create: %+v, %v (calls %d)", e1, err, calls)
	}
	e2, err := c.Update(ctx, ns, "list", appendToken(ns, "list", "b", nil))
	if err != nil || e2.Revision != 2 || layoutOf(t, e2) != "a b" {
		t.Fatalf("merge: %+v, %v", e2, err)
	}
	// No change: nothing is written and the current entry comes back.
	var seen *wire.Entry
	e3, err := c.Update(ctx, ns, "list", func(cur *wire.Entry) (*wire.PutRequest, error) { seen = cur; return nil, nil })
	if err != nil || !entryEqual(e3, e2) || seen == nil || !entryEqual(*seen, e2) {
		t.Fatalf("no-change update = %+v, %v (fn saw %+v)", e3, err, seen)
	}
	if got, _ := c.Get(ctx, ns, "list"); got.Revision != 2 {
		t.Fatalf("a no-change update wrote revision %d", got.Revision)
	}
	empty, err := c.Update(ctx, ns, "missing", func(cur *wire.Entry) (*wire.PutRequest, error) {
		if cur != nil {
			t.Errorf("fn got %+v for a missing key", cur)
		}
		return nil, nil
	})
	if err != nil || empty.Revision != 0 || empty.Key != "" {
		t.Fatalf("no-change update of a missing key = %+v, %v", empty, err)
	}
}

func TestUpdateRetriesOnConflict(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	other := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	if _, err := c.Put(ctx, preference(ns, "list", "a")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	merge := appendToken(ns, "list", "mine", nil)
	e, err := c.Update(ctx, ns, "list", func(cur *wire.Entry) (*wire.PutRequest, error) {
		calls++
		if calls == 1 { // someone else writes between our read and our write
			if _, err := other.Update(ctx, ns, "list", appendToken(ns, "list", "theirs", nil)); err != nil {
				return nil, err
			}
		}
		return merge(cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || layoutOf(t, e) != "a theirs mine" || e.Revision != 3 {
		t.Fatalf("after a conflict: %q at %d with %d calls; want %q at 3 with 2 calls", layoutOf(t, e), e.Revision, calls, "a theirs mine")
	}
}

func TestUpdateGivesUpAfterMaxAttempts(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	other := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	calls := 0
	_, err := c.Update(ctx, ns, "hot", func(cur *wire.Entry) (*wire.PutRequest, error) {
		calls++
		if _, err := other.Put(ctx, preference(ns, "hot", fmt.Sprint(calls))); err != nil {
			return nil, err
		}
		req := preference(ns, "hot", "never")
		return &req, nil
	})
	if !errors.Is(err, wire.ErrConflict) || calls != MaxUpdateAttempts {
		t.Fatalf("err = %v after %d calls; want CONFLICT after %d", err, calls, MaxUpdateAttempts)
	}
	if got, _ := c.Get(ctx, ns, "hot"); layoutOf(t, got) == "never" {
		t.Fatal("a conflicting update was written")
	}
}

func TestUpdateStopsOnOtherErrors(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	calls := 0
	count := func(*wire.Entry) (*wire.PutRequest, error) { calls++; return nil, nil }
	if _, err := c.Update(ctx, "service/x", "k", count); !errors.Is(err, wire.ErrPermissionDenied) || calls != 0 {
		t.Fatalf("update of service/x: %v after %d calls", err, calls)
	}
	boom := errors.New("boom")
	if _, err := c.Update(ctx, "user/alice", "k", func(*wire.Entry) (*wire.PutRequest, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("fn error: %v", err)
	}
	bad := 0
	_, err := c.Update(ctx, "user/alice", "k", func(*wire.Entry) (*wire.PutRequest, error) {
		bad++
		req := preference("user/alice", "k", "x")
		req.Schema = "keeppeek.lease.v1"
		return &req, nil
	})
	if !errors.Is(err, wire.ErrSchemaInvalid) || bad != 1 {
		t.Fatalf("schema failure: %v after %d calls; want SCHEMA_INVALID, no retry", err, bad)
	}
	_, err = c.Update(ctx, "user/alice", "k", func(*wire.Entry) (*wire.PutRequest, error) {
		req := preference("user/alice", "other", "x")
		return &req, nil
	})
	if !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("put of another key: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.Get(ctx, "user/alice", "other"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("another key was written: %v", err)
	}
}

func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	env := startEnv(t)
	ctx := ctxT(t)
	const ns, key, perWriter = "user/alice", "shared", 15
	var wg sync.WaitGroup
	errs := make(chan error, 2*perWriter)
	for g := range 2 {
		c := newClient(t, env, alice.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				if _, err := c.Update(ctx, ns, key, appendToken(ns, key, fmt.Sprintf("g%d-%d", g, i), nil)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c := newClient(t, env, alice.ID)
	e, err := c.Get(ctx, ns, key)
	if err != nil {
		t.Fatal(err)
	}
	tokens := strings.Fields(layoutOf(t, e))
	var want []string
	for g := range 2 {
		for i := range perWriter {
			want = append(want, fmt.Sprintf("g%d-%d", g, i))
		}
	}
	got := slices.Clone(tokens)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || e.Revision != 2*perWriter {
		t.Fatalf("layout %v at revision %d; want each of %v once at revision %d", tokens, e.Revision, want, 2*perWriter)
	}
	// Each writer's own tokens stay in its order.
	for g := range 2 {
		last := -1
		for _, tok := range tokens {
			var gg, i int
			if _, err := fmt.Sscanf(tok, "g%d-%d", &gg, &i); err == nil && gg == g {
				if i <= last {
					t.Fatalf("writer %d's tokens out of order: %v", g, tokens)
				}
				last = i
			}
		}
	}
}
