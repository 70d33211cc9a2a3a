package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
)

// Start removes the backup files a killed server left in BackupDir only when its store is served: a
// second stated started on a data directory whose database another, running stated holds opens its
// store unavailable (the file is locked), and must not remove the backups the running one is serving
// from the same directory, which would fail that one's backup downloads half-way.
func TestStartOnALockedDatabaseKeepsTheRunningServersBackups(t *testing.T) {
	data := t.TempDir()
	path := filepath.Join(data, "state-store.db")
	running, err := store.Open(path, store.DefaultOptions())
	if err != nil || running.Unavailable() != nil {
		t.Fatalf("first store: %v %v", err, running.Unavailable())
	}
	defer running.Close()
	backups := filepath.Join(data, "backups")
	if err := os.MkdirAll(backups, 0o700); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(backups, "keeppeek-backup-served.db") // a backup the running server serves
	if err := os.WriteFile(open, []byte("backup"), 0o600); err != nil {
		t.Fatal(err)
	}

	opts := store.DefaultOptions()
	opts.OpenTimeout = 50 * time.Millisecond
	second, err := store.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if second.Unavailable() == nil {
		t.Fatal("a second store opened a locked database")
	}
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := New(second, nc, Options{BackupDir: backups})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(t.Context()) }()
	if _, err := os.Stat(open); err != nil {
		t.Fatalf("a server whose store is not served removed another server's open backup: %v", err)
	}
}
