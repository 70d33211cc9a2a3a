package stated

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// `stated nats-permissions` writes each password so that nats-server reads it back byte for byte,
// whatever it holds: nats-server's configuration syntax has only the escapes \xXX, \t, \n, \r, \" and
// \\, so Go quoting (\u00a0, \a) made it refuse the whole file. A server configured from the output
// lets the principal in with its password.
func TestPrintedPasswordsReadBackExactly(t *testing.T) {
	passwords := []string{`p"w\x`, "tab\there", "nb\u00a0sp", "$HOME", "a$b", "bell\a", "zw\u200bj", "é", "a#b",
		"x\x7fy", "ctl\x01", "  lead", "a // b", "emoji😀", "bom\ufeff", "line\nbreak\r", "$2a$10$notahash"}
	for _, pw := range passwords {
		cfg := DefaultConfig()
		cfg.Principals = []PrincipalConfig{{ID: "a", Password: pw}}
		out := PermissionsConfig(cfg)
		file := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Errorf("password %q: nats-server refuses the output: %v\n%s", pw, err, out)
			continue
		}
		if len(opts.Users) != 1 || opts.Users[0].Username != "a" || opts.Users[0].Password != pw {
			t.Errorf("password %q: nats-server read %+v", pw, opts.Users)
		}
	}
	// One of them, end to end: a server configured from the output takes the password.
	pw := "nb\u00a0sp\a"
	cfg := DefaultConfig()
	cfg.Principals = []PrincipalConfig{{ID: "a", Password: pw}}
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(PermissionsConfig(cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(permTimeout) {
		t.Fatal("not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("a", pw))
	if err != nil {
		t.Fatalf("connect with the password: %v", err)
	}
	nc.Close()
}
