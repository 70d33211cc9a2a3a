package server

import (
	"os"
	"testing"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// A backup runs within the server's life: once Stop has given up waiting (its context ended) and
// cancelled the server's context, a backup still being written stops and answers UNAVAILABLE, leaving
// no file, rather than write the rest of the database while Stop waits for its read transaction to
// close the store. A backup open that finds the context already cancelled shows it: it took a whole
// backup, under context.Background, before.
func TestBackupEndsWithTheServersContext(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, Options{BackupDir: dir})
	s.cancel() // as Stop does once its context has ended
	res := s.backup(policy.Principal{ID: "coordinator", Admin: true}, wire.BackupRequest{RequestID: 3, Step: "open"})
	if res.OK || res.Error == nil || res.Error.Code != wire.CodeUnavailable {
		t.Fatalf("backup after the server's context ended: %+v, want UNAVAILABLE", res)
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 {
		t.Fatalf("the refused backup left %d files in the backup directory", len(files))
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}
