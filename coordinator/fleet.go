package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// workersPrefix is the key prefix of the worker entries the server keeps in the system namespace.
const workersPrefix = "workers/"

// Worker is one live worker as its heartbeats describe it: the server's keeppeek.worker-status.v1
// entry at system/workers/<principal>/<worker_id> (SPEC section 11). The entry lives while the worker
// heartbeats; it expires three heartbeat intervals (at least one second) after the last one.
type Worker struct {
	// Principal is the principal that published the heartbeats.
	Principal string
	// WorkerID is the worker's id, unique per principal.
	WorkerID string
	// Service is the service the worker says it works for.
	Service string
	// Status is starting, ready, draining or stopping (wire.StatusReady, ...).
	Status string
	// IntervalMs is the worker's heartbeat interval.
	IntervalMs int64
	// Leases are the lease keys the worker says it holds (keys of its service's namespace). They are
	// what the heartbeats claim, not the authority: the lease entry is.
	Leases []string
	// FirstSeenMs is when the server saw the worker's first heartbeat.
	FirstSeenMs int64
	// ExpiresAtMs is the entry's deadline. Fleet returns the current one; a FleetView shows the one of
	// the entry's last change, because heartbeats that change nothing only push the deadline forward
	// without an update to watchers.
	//
	// FirstSeenMs and ExpiresAtMs are times of the state server's clock, which may be seconds or
	// minutes off this host's: compare them with each other, not with time.Now(). Liveness needs no
	// clock: a worker is alive while its entry exists (FleetView.Alive, Fleet).
	ExpiresAtMs int64
	// Revision is the system namespace revision of the entry's last change.
	Revision uint64
}

// workerOf decodes a worker entry.
func workerOf(e *wire.Entry) (Worker, error) {
	if e.Schema != wire.SchemaWorkerStatus {
		return Worker{}, fmt.Errorf("coordinator: %s has schema %s, not %s", e.String(), e.Schema, wire.SchemaWorkerStatus)
	}
	var d wire.WorkerStatus
	if err := json.Unmarshal(e.Document, &d); err != nil {
		return Worker{}, fmt.Errorf("coordinator: decode worker %s: %w", e.String(), err)
	}
	return Worker{Principal: d.Principal, WorkerID: d.WorkerID, Service: d.Service, Status: d.Status,
		IntervalMs: d.IntervalMs, Leases: d.Leases, FirstSeenMs: d.FirstSeenMs, ExpiresAtMs: e.ExpiresAtMs,
		Revision: e.Revision}, nil
}

func compareWorkers(a, b Worker) int {
	return cmp.Or(cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.WorkerID, b.WorkerID))
}

func (w Worker) clone() Worker {
	w.Leases = slices.Clone(w.Leases)
	return w
}

// Fleet lists the live workers, ordered by principal and worker id, paging through system/workers/
// with after_key. The pages are read one after another, not atomically: a worker that appears or
// expires while Fleet runs may be missing or listed. The system namespace is readable by admin
// principals only: anyone else gets PERMISSION_DENIED. An entry that does not decode as a worker
// status (the server writes them, so this would be a server bug) is logged and left out.
func (c *Coordinator) Fleet(ctx context.Context) ([]Worker, error) {
	var out []Worker
	after := ""
	for {
		res, err := c.client.List(ctx, wire.ListRequest{Namespace: string(wire.KindSystem), KeyPrefix: workersPrefix,
			AfterKey: after, Limit: c.pageLimit})
		if err != nil {
			return nil, err
		}
		for i := range res.Entries {
			w, err := workerOf(&res.Entries[i])
			if err != nil {
				c.log.Warn("coordinator: skipping a worker entry", "err", err)
				continue
			}
			out = append(out, w)
		}
		if res.NextAfterKey == "" {
			break
		}
		if res.NextAfterKey <= after {
			return nil, fmt.Errorf("coordinator: list of system/%s did not advance past %q", workersPrefix, after)
		}
		after = res.NextAfterKey
	}
	slices.SortFunc(out, compareWorkers)
	return out, nil
}

// FleetView is a live view of the worker fleet: a client.Cache (a gap-free watch) on
// system/workers/, decoded into Workers. A worker that stops heartbeating leaves the view when its
// entry expires (one EXPIRE update). Its methods are safe for concurrent use. Close stops it.
//
// A watch snapshot is bounded (max_snapshot_entries, by default 64, and max_snapshot_bytes): a fleet
// larger than that cannot be watched under one prefix. WatchFleet then fails with WATCH_TOO_BROAD;
// a view that outgrows the bound follows on until its watch has to be renewed (a reconnect, say), and
// then stops following, which Err reports, until the fleet fits again. Use Fleet, which pages, for
// such a fleet.
type FleetView struct {
	cache *client.Cache
	log   *slog.Logger

	mu      sync.RWMutex
	workers map[string]Worker // by entry key

	installed bool          // the first snapshot is in; owned by the cache goroutine
	changes   chan struct{} // one token: something changed since the last receive
	endOnce   sync.Once     // closes changes

	closeOnce sync.Once
	closeErr  error
}

// WatchFleet starts a FleetView and returns once it holds the fleet's snapshot. ctx bounds only that
// wait; the view follows changes until Close. Transient failures (no state server answering, ...)
// are retried until ctx ends, and then ctx's error is returned (wrapped); PERMISSION_DENIED (the
// principal is not an admin), WATCH_TOO_BROAD and a NATS connection closed for good (wrapping
// nats.ErrConnectionClosed) are returned at once. A failed WatchFleet leaves nothing to Close.
func (c *Coordinator) WatchFleet(ctx context.Context) (*FleetView, error) {
	v := &FleetView{log: c.log, workers: map[string]Worker{}, changes: make(chan struct{}, 1)}
	cache, err := c.client.NewCache(ctx, client.CacheOptions{
		Namespace: string(wire.KindSystem),
		KeyPrefix: workersPrefix,
		Logger:    c.log,
		Handlers:  client.Handlers{OnPut: v.onPut, OnDelete: v.onGone, OnExpire: v.onGone, OnResync: v.onResync},
	})
	if err != nil {
		return nil, err
	}
	v.cache = cache
	// A cache whose NATS connection closed stops by itself: the view then follows nothing more, and
	// readers of Changes must learn it. The cache's goroutine, the only sender, has ended by then.
	go func() {
		<-cache.Done()
		v.endChanges()
	}()
	return v, nil
}

func (v *FleetView) endChanges() { v.endOnce.Do(func() { close(v.changes) }) }

// Handlers, called one at a time on the cache's goroutine.

func (v *FleetView) onPut(e wire.Entry) {
	w, err := workerOf(&e)
	v.mu.Lock()
	if err != nil {
		delete(v.workers, e.Key)
	} else {
		v.workers[e.Key] = w
	}
	v.mu.Unlock()
	if err != nil {
		v.log.Warn("coordinator: fleet view skips a worker entry", "err", err)
	}
	v.notify()
}

func (v *FleetView) onGone(key string, _ uint64) {
	v.mu.Lock()
	delete(v.workers, key)
	v.mu.Unlock()
	v.notify()
}

func (v *FleetView) onResync(snapshot []wire.Entry, _ uint64) {
	workers := make(map[string]Worker, len(snapshot))
	for i := range snapshot {
		w, err := workerOf(&snapshot[i])
		if err != nil {
			v.log.Warn("coordinator: fleet view skips a worker entry", "err", err)
			continue
		}
		workers[snapshot[i].Key] = w
	}
	v.mu.Lock()
	v.workers = workers
	v.mu.Unlock()
	if v.installed {
		v.notify()
	}
	v.installed = true
}

func (v *FleetView) notify() {
	select {
	case v.changes <- struct{}{}:
	default:
	}
}

// Workers returns the live workers, ordered by principal and worker id. The caller owns the slice.
func (v *FleetView) Workers() []Worker {
	v.mu.RLock()
	out := make([]Worker, 0, len(v.workers))
	for _, w := range v.workers {
		out = append(out, w.clone())
	}
	v.mu.RUnlock()
	slices.SortFunc(out, compareWorkers)
	return out
}

// Worker returns the worker workerID of principal, if it is live.
func (v *FleetView) Worker(principal, workerID string) (Worker, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	w, ok := v.workers[wire.WorkerKey(principal, workerID)]
	return w.clone(), ok
}

// Alive reports whether the worker workerID of principal is live: its entry exists, so it has
// heartbeated within three of its intervals (whatever its status; a draining worker is alive). That
// holds while the view follows the fleet (Following); otherwise it is the view's last word.
func (v *FleetView) Alive(principal, workerID string) bool {
	_, ok := v.Worker(principal, workerID)
	return ok
}

// Holder returns the live worker whose heartbeats list lease among its leases. Heartbeats are
// advisory and lag behind the lease entries: while a lease changes hands two workers may list it,
// and then the one whose entry changed last (the higher revision) is returned. Lease keys are keys of
// a service's namespace, so two services may use the same key; filter Workers by Service when that
// matters.
func (v *FleetView) Holder(lease string) (Worker, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var best Worker
	found := false
	for _, w := range v.workers {
		if !slices.Contains(w.Leases, lease) {
			continue
		}
		if !found || w.Revision > best.Revision || (w.Revision == best.Revision && compareWorkers(w, best) < 0) {
			best, found = w, true
		}
	}
	return best.clone(), found
}

// Err returns why the view cannot watch again, while that lasts: the store refused the re-watch after
// the view's watch ended (a reconnect, an OVERFLOW, ...), with WATCH_TOO_BROAD once the fleet outgrew
// the snapshot bound, or PERMISSION_DENIED once the principal lost its admin right. The view retries
// meanwhile, but holds its last contents: a worker that stopped since then is still listed (Alive,
// Holder) until the view follows again and Err returns nil. Use Fleet, which pages, while Err is not
// nil. Err is nil while the view follows, but nil does not mean it follows: it is nil too while no
// state server answers (see Following), after Close, and once the NATS connection was closed for
// good, which closes Changes (the view follows nothing more; a new client and WatchFleet are needed).
func (v *FleetView) Err() error { return v.cache.Err() }

// Following reports whether the view follows the fleet now. It is false from the moment its watch
// ends until a new snapshot is in: while stated is down or unreachable, say, which Err does not
// report (the view retries; nothing refused it). Meanwhile Alive, Holder and Workers are the view's
// last word: a worker that stopped since is still listed.
func (v *FleetView) Following() bool { return v.cache.Following() }

// Changes returns a channel that receives a token after the view changed (a worker appeared,
// changed or left, or a resync replaced the view). Notifications coalesce: one token may stand for
// several changes, so read the view after each receive. The channel is closed by Close, and once the
// view follows nothing more because its NATS connection was closed (the view keeps its last contents).
func (v *FleetView) Changes() <-chan struct{} { return v.changes }

// Close stops following the fleet: it closes the watch and then the Changes channel. The view keeps
// its last contents. It returns the cache's close error; later calls return the same.
func (v *FleetView) Close() error {
	v.closeOnce.Do(func() {
		v.closeErr = v.cache.Close()
		v.endChanges()
	})
	return v.closeErr
}
