package server

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// startServer starts a Server with opts (principal coordinator, an admin, unless opts name some) over a
// store on disk and an embedded NATS server; the test stops it.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, _ := newServer(t, natstest.Start(t, natsserver.Options{}), store.DefaultOptions(), opts)
	return s
}

// newServer starts a Server with opts (principal coordinator, an admin, unless opts name some) over a
// store opened with so on disk, which it returns, and the embedded NATS server ns.
func newServer(t *testing.T, ns *natsserver.Server, so store.Options, opts Options) (*Server, *store.Store) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), so)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if opts.Principals == nil {
		opts.Principals = []policy.Principal{{ID: "coordinator", Admin: true}}
	}
	s, err := New(st, nc, opts)
	if err == nil {
		err = s.Start()
	}
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return s, st
}

// Stop waits for what the queues and lanes hold (acks, unwatches, heartbeats) only until its context
// ends, as it waits for any request: a queue stuck on the store never keeps a SIGTERM from finishing.
func TestStopWaitsForBusyLanesOnlyWithinItsContext(t *testing.T) {
	s := startServer(t, Options{})
	release := make(chan struct{})
	for _, run := range []func(fn func()){
		func(fn func()) { s.queues.offer("coordinator", fn) },
		func(fn func()) { s.hbLanes.offer("alice", "kp.heartbeat.v1.alice.w1", fn) },
	} {
		running := make(chan struct{})
		run(func() { close(running); <-release })
		<-running
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with busy lanes returned %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Stop waited for busy lanes past its context")
	}
	close(release)
	// The queues finish once released: nothing is left running (goleak checks at the end).
	s.queues.wg.Wait()
	s.hbLanes.wg.Wait()
}

// Stop is bounded by its context even when a principal's queue is full (acks keep coming while the
// store stalls them): a request offered to a full queue is refused at once rather than wait for room,
// so nothing waits on a queue that is not draining.
func TestStopWithAFullQueueIsBoundedByItsContext(t *testing.T) {
	s := startServer(t, Options{})
	release := make(chan struct{})
	running := make(chan struct{})
	const key = "alice"
	s.queues.offer(key, func() { close(running); <-release })
	<-running
	for range s.queues.limit { // fill the queue behind the busy function
		s.queues.offer(key, func() {})
	}
	if got := s.queues.offer(key, func() {}); got != offerFull {
		t.Fatalf("offer to a full queue: %v, want offerFull", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	returned := false
	select {
	case err := <-stopped:
		returned = true
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop with a full, busy queue returned %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Stop waited for a full queue past its context")
	}
	close(release)
	if !returned {
		<-stopped
	}
	s.queues.wg.Wait()
}

// Bounds a NATS message could not carry (a document of max_document_bytes with its envelope, a watch
// reply of max_snapshot_bytes, against the server's max_payload) are refused when the server is made,
// naming the bound; the defaults fit.
func TestBoundsBeyondTheNATSPayloadAreRefused(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dir := t.TempDir()
	for name, set := range map[string]func(*wire.Bounds){
		"":                   func(*wire.Bounds) {},
		"max_document_bytes": func(b *wire.Bounds) { b.MaxDocumentBytes = nc.MaxPayload() - envelopeRoom + 1 },
		"max_snapshot_bytes": func(b *wire.Bounds) { b.MaxSnapshotBytes = nc.MaxPayload() + 1 },
	} {
		opts := store.DefaultOptions()
		set(&opts.Bounds)
		st, err := store.Open(filepath.Join(dir, name+"state-store.db"), opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(st, nc, Options{})
		_ = st.Close()
		switch {
		case name == "" && err != nil:
			t.Fatalf("default bounds refused: %v", err)
		case name != "" && (err == nil || !strings.Contains(err.Error(), name)):
			t.Fatalf("%s beyond max_payload %d: %v, want it refused by name", name, nc.MaxPayload(), err)
		}
	}
}

// Past MaxConcurrentRequests, a request waits in NATS until one being handled ends: it is not
// answered while every slot is taken, and is once one frees.
func TestRequestsBeyondTheConcurrencyBoundWait(t *testing.T) {
	s := startServer(t, Options{MaxConcurrentRequests: 1})
	defer func() { _ = s.Stop(context.Background()) }()
	nc := s.nc
	subject := wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpInfo)
	if _, err := nc.Request(subject, []byte(`{"request_id":1}`), 10*time.Second); err != nil {
		t.Fatalf("info with a free slot: %v", err)
	}
	s.slots <- struct{}{} // a request being handled holds the only slot
	if _, err := nc.Request(subject, []byte(`{"request_id":2}`), 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("info with no free slot: %v, want no answer", err)
	}
	reply, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(subject, reply.Subject, []byte(`{"request_id":3}`)); err != nil {
		t.Fatal(err)
	}
	<-s.slots // that request ends
	m, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the waiting request was not answered once a slot freed: %v", err)
	}
	if !strings.Contains(string(m.Data), `"request_id":3`) {
		t.Fatalf("reply %s", m.Data)
	}
}

// Opened backups live in BackupDir: Start removes the files a killed server left there, an idle one
// goes after backupIdle, and one that opens after Stop closed them all is refused and removed.
func TestBackupFilesNeverPileUp(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "keeppeek-backup-123.db")
	other := filepath.Join(dir, "notes.txt")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, Options{BackupDir: dir})
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a stale backup file survived Start: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("Start removed a file that is not a backup: %v", err)
	}
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("backup"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	idle := file("keeppeek-backup-idle.db")
	id, ok := s.backups.add(&backupFile{owner: "coordinator", path: idle, size: 6, used: time.Now().Add(-backupIdle)})
	if !ok {
		t.Fatal("backup refused before Stop")
	}
	s.backups.expire(id) // as its timer would
	if _, err := os.Stat(idle); !errors.Is(err, fs.ErrNotExist) || s.backups.get("coordinator", id) != nil {
		t.Fatalf("an idle backup was kept: %v", err)
	}
	used := file("keeppeek-backup-used.db")
	id, _ = s.backups.add(&backupFile{owner: "coordinator", path: used, size: 6, used: time.Now()})
	s.backups.expire(id) // read within backupIdle: kept
	if s.backups.get("coordinator", id) == nil {
		t.Fatal("a backup read within backupIdle was removed")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(used); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stop left an open backup's file: %v", err)
	}
	late := file("keeppeek-backup-late.db")
	if _, ok := s.backups.add(&backupFile{owner: "coordinator", path: late, size: 6, used: time.Now()}); ok {
		t.Fatal("a backup that opened after Stop was kept")
	}
	if _, err := os.Stat(late); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a backup that opened after Stop left its file: %v", err)
	}
}
