package main_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/keeppeek/coordination/internal/e2e"
)

// SPEC 14 lets a principal be authenticated by an nkey instead of a password. statectl could only
// send a password, so such a principal could not use it at all: --nkey FILE (or STATECTL_NKEY)
// signs in with the seed in FILE.
func TestNkeyPrincipal(t *testing.T) {
	t.Parallel()
	_, bin := binaries(t)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	kpAdmin, _ := nkeys.CreateUser()
	adminPub, _ := kpAdmin.PublicKey()
	s := e2e.NewStated(t, e2e.Config{Principals: append(principals[:len(principals):len(principals)], e2e.Principal{ID: "keyed", Nkey: pub},
		e2e.Principal{ID: "keyed-admin", Admin: true, Nkey: adminPub})})
	s.Start()
	e := &env{t: t, s: s, bin: bin, dir: t.TempDir()}
	seedFile := e.file("keyed.nk", string(seed)+"\n")

	doc := e.file("pref.json", `{"kind":"dark"}`)
	e.ok("--user", "keyed", "--nkey", seedFile, "put", "user/keyed", "prefs/ui", prefSchema, doc)
	if r := e.ok("--user", "keyed", "--nkey", seedFile, "get", "user/keyed", "prefs/ui"); !strings.Contains(r.stdout, "dark") {
		t.Fatalf("get with the nkey: %s", r)
	}

	// From the environment, for the environment's user only.
	envRun := func(args ...string) result {
		return e.runEnv([]string{"STATECTL_USER=keyed", "STATECTL_PASSWORD=", "STATECTL_NKEY=" + seedFile}, args...)
	}
	if r := envRun("get", "user/keyed", "prefs/ui"); r.code != 0 || !strings.Contains(r.stdout, "dark") {
		t.Fatalf("get with STATECTL_NKEY: %s", r)
	}
	if r := envRun("--user", "alice", "get", "user/alice", "x"); r.code != 3 || !strings.Contains(r.stderr, "STATECTL_NKEY was not sent") {
		t.Fatalf("another --user got the environment's nkey: %s", r)
	}

	// Usage errors, before any connection: a seed that is no file, or not a seed; and two ways to
	// authenticate at once.
	e.fails(2, "USAGE", "--user", "keyed", "--nkey", e.dir+"/missing.nk", "get", "user/keyed", "prefs/ui")
	e.fails(2, "USAGE", "--user", "keyed", "--nkey", doc, "get", "user/keyed", "prefs/ui")
	e.fails(2, "USAGE", "--user", "keyed", "--nkey", seedFile, "--password", "x", "get", "user/keyed", "prefs/ui")
	// bench connects with the nkey too (every principal it connects as must be an admin); --admins
	// names principals by password, so the two together are bad usage.
	adminSeed, _ := kpAdmin.Seed()
	adminSeedFile := e.file("keyed-admin.nk", string(adminSeed)+"\n")
	if r := e.ok(tinyBench("--user", "keyed-admin", "--nkey", adminSeedFile)...); !strings.Contains(r.stdout, "serial-cas-p50-us") {
		t.Fatalf("bench with an nkey: %s", r)
	}
	e.fails(2, "USAGE", tinyBench("--user", "keyed-admin", "--nkey", adminSeedFile, "--admins", "coordinator:coord-pw")...)
	// A seed the server does not know is refused like a wrong password.
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	e.fails(3, "CONNECTION", "--user", "keyed", "--nkey", e.file("other.nk", string(otherSeed)), "get", "user/keyed", "prefs/ui")
}
