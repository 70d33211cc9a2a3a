package main_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// waitForLog waits until stated's log holds want, within the test timeout.
func waitForLog(t *testing.T, logs func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(logs(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stated never logged %q:\n%s", want, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2ESighupKeepsTheSubjectPrefixInForce: SIGHUP reloads principals only. A configuration file
// whose subject_prefix changed meanwhile must not give the principals NATS permissions under a
// prefix the running server does not serve: they keep working under the prefix in force, and the
// log says the change needs a restart.
func TestE2ESighupKeepsTheSubjectPrefixInForce(t *testing.T) {
	s := startStated(t)
	alice, errs := conn(t, s, "alice")
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ConfigPath, append([]byte("subject_prefix = \"acme\"\n"), raw...), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded")
	if !strings.Contains(s.Logs(), "subject_prefix") {
		t.Fatalf("the log does not say the subject_prefix change waits for a restart:\n%s", s.Logs())
	}
	r := request(t, alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"prefs","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`)
	if !r.OK {
		t.Fatalf("alice's put after the reload: %+v", r)
	}
	select {
	case err := <-errs:
		t.Fatalf("alice's connection after the reload: %v", err)
	default:
	}
}

// TestE2ESighupNamesWhatWaitsForARestart: a SIGHUP applies principals only. A file whose data_dir
// or [nats] section changed meanwhile was reloaded without a word, and the operator believed the
// change in force; the log names each setting that waits for the next restart.
func TestE2ESighupNamesWhatWaitsForARestart(t *testing.T) {
	s := startStated(t)
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(raw), "[nats]\n", "[nats]\nwatch_sweep_ms = 100\n", 1)
	conf = "data_dir = \"/elsewhere\"\n" + strings.Replace(conf, "data_dir = ", "# data_dir = ", 1)
	if err := os.WriteFile(s.ConfigPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded")
	waitForLog(t, s.Logs, "in effect at the next restart: data_dir, nats.watch_sweep_ms")
}

// TestE2ESighupRefusesBoundsStatedCouldNotStartOn: bounds wait for the next restart, and stated
// refuses to start on a max_document_bytes that a NATS message could not carry. A SIGHUP of such a
// file reloaded its principals and logged that the bounds would take effect at the next restart,
// which would then fail. Like a malformed file, it is refused, with a clear error, and changes
// nothing: a principal added in the same edit cannot log in. Once the bound is put right, it can.
func TestE2ESighupRefusesBoundsStatedCouldNotStartOn(t *testing.T) {
	s := startStated(t)
	carol := e2e.Principal{ID: "carol", Password: "carol-pw"}
	s.WriteConfig(e2e.Config{Principals: append(slices.Clone(principals), carol), Extra: "[bounds]\nmax_document_bytes = 2000000\n"})
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: configuration not reloaded")
	if !strings.Contains(s.Logs(), "max_payload") {
		t.Fatalf("the refusal does not say why:\n%s", s.Logs())
	}
	if strings.Contains(s.Logs(), "principals reloaded") {
		t.Fatalf("a refused SIGHUP reloaded the principals:\n%s", s.Logs())
	}
	if nc, err := nats.Connect(s.URL(), nats.UserInfo(carol.ID, carol.Password)); err == nil {
		nc.Close()
		t.Fatal("a principal of a refused SIGHUP can log in")
	}
	s.WriteConfig(e2e.Config{Principals: append(slices.Clone(principals), carol)})
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded")
	nc, err := nats.Connect(s.URL(), nats.UserInfo(carol.ID, carol.Password))
	if err != nil {
		t.Fatalf("carol after a good SIGHUP: %v", err)
	}
	nc.Close()
}

// TestE2ESighupRefusesASettingsSectionTheNextStartWouldNotServe: a section added to
// [state_store.settings] waits for the next start, which would not serve the store (every operation
// UNAVAILABLE) if the section held an entry the store refuses, or named a namespace holding entries in
// the database. A SIGHUP of such a file reloaded the principals all the same; it is now refused whole,
// naming why, and a principal added with it cannot log in. A sound section added is taken, and named
// as waiting for the restart.
func TestE2ESighupRefusesASettingsSectionTheNextStartWouldNotServe(t *testing.T) {
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
		t.Fatalf("put: %+v", r)
	}
	section := func(ns, doc string) string {
		return fmt.Sprintf("[state_store.settings.%q]\nrevision = 1\n\n[state_store.settings.%q.entries.\"bridge/config\"]\n"+
			"schema = \"keeppeek.lease.v1\"\nowner = \"coordinator\"\nrevision = 1\ncreated_at_ms = 1\nupdated_at_ms = 1\ndocument = '%s'\n", ns, ns, doc)
	}
	carol := e2e.Principal{ID: "carol", Password: "carol-pw"}
	for _, c := range []struct{ extra, why string }{
		{section("service/mqtt-bridge", `{"holder":"not a worker id!","claimed_at_ms":1}`), "SCHEMA_INVALID"},
		{"[state_store.settings.\"service/tx\"]\n", "service/tx holds 1 entries in the database"},
	} {
		before := len(s.Logs())
		s.WriteConfig(e2e.Config{Principals: append(slices.Clone(principals), carol), Extra: c.extra})
		s.Reload()
		logs := func() string { return s.Logs()[before:] }
		waitForLog(t, logs, "SIGHUP: configuration not reloaded")
		if !strings.Contains(logs(), c.why) || !strings.Contains(logs(), "the next start would not serve the store") {
			t.Fatalf("the refusal does not say why (%s):\n%s", c.why, logs())
		}
		if strings.Contains(logs(), "principals reloaded") {
			t.Fatalf("a refused SIGHUP reloaded the principals:\n%s", logs())
		}
		if nc, err := nats.Connect(s.URL(), nats.UserInfo(carol.ID, carol.Password)); err == nil {
			nc.Close()
			t.Fatal("a principal of a refused SIGHUP can log in")
		}
	}
	s.WriteConfig(e2e.Config{Principals: append(slices.Clone(principals), carol), Extra: section("service/mqtt-bridge", `{"holder":"bridge-1","claimed_at_ms":1}`)})
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded")
	waitForLog(t, s.Logs, "in effect at the next restart: the settings-backed namespaces")
	nc, err := nats.Connect(s.URL(), nats.UserInfo(carol.ID, carol.Password))
	if err != nil {
		t.Fatalf("carol after a good SIGHUP: %v", err)
	}
	nc.Close()
}
