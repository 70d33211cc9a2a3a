package stated

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stated.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	p := writeConfig(t, `
data_dir = "/var/lib/kp"
subject_prefix = "acme"

[nats]
watch_sweep_ms = 5000

[[principals]]
id = "coordinator"
admin = true
password = "pw"

[[principals]]
id = "media"
media = true
nkey = "UCQQMSRE3RWAQSET43FQ5MWMAZURBH4KIMVLXL2HLHCK5SKICYCJKWIL"

[bounds]
max_pending_updates = 8
ack_deadline_ms = 1000
max_workers_per_principal = 40

[state_store.settings."service/mqtt-bridge"]
revision = 2
`)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.BoundsValue()
	if err != nil || b.MaxPendingUpdates != 8 || b.AckDeadlineMs != 1000 || b.MaxWatches != 1024 || b.MaxWorkersPerPrincipal != 40 {
		t.Fatalf("bounds %+v %v", b, err)
	}
	if c.DatabasePath() != "/var/lib/kp/state-store.db" || c.NATS.Listen != DefaultNATSListen || c.HTTPListen != DefaultHTTPListen ||
		c.NATS.WatchSweepMs != 5000 {
		t.Fatalf("config %+v", c)
	}
	ps := c.PolicyPrincipals()
	if len(ps) != 2 || !ps[0].Admin || ps[1].Admin {
		t.Fatalf("principals %+v", ps)
	}
	out := PermissionsConfig(c)
	for _, want := range []string{`"acme.state.v1.coordinator.>"`, `"acme.admin.v1.coordinator.>"`, `"_INBOX.media.>"`,
		`nkey: "UCQQMSRE3RWAQSET43FQ5MWMAZURBH4KIMVLXL2HLHCK5SKICYCJKWIL"`, `"acme.media.v1.*.>"`, `"_INBOX.*.>"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("permissions lack %s:\n%s", want, out)
		}
	}
	if strings.Contains(strings.Split(out, "media")[0], `"_INBOX.*.>"`) || strings.Contains(out, "allow_responses") {
		t.Fatalf("a non-media principal may answer requests, or a principal may answer on any subject:\n%s", out)
	}
	// nats-server reads it as a configuration file.
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("nats-server rejects the generated configuration: %v\n%s", err, out)
	}
	if !opts.NoFastProducerStall || len(opts.Users)+len(opts.Nkeys) != 2 {
		t.Fatalf("nats-server read no_fast_producer_stall %v, %d users, %d nkey users", opts.NoFastProducerStall, len(opts.Users), len(opts.Nkeys))
	}
}

func TestDefaultConfigHasTheDevPrincipal(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ps := c.PolicyPrincipals()
	if len(ps) != 1 || ps[0].ID != DevPrincipal || !ps[0].Admin {
		t.Fatalf("principals %+v", ps)
	}
}

func TestLoadConfigRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key":        "datadir = \"x\"\n",
		"unknown bound":      "[bounds]\nmax_everything = 3\n",
		"zero bound":         "[bounds]\nmax_watches = 0\n",
		"bad principal":      "[[principals]]\nid = \"Bad\"\npassword = \"x\"\n",
		"no credential":      "[[principals]]\nid = \"a\"\n",
		"two credentials":    "[[principals]]\nid = \"a\"\npassword = \"x\"\nnkey = \"UA\"\n",
		"bad nkey":           "[[principals]]\nid = \"a\"\nnkey = \"UABC\"\n",
		"duplicate":          "[[principals]]\nid = \"a\"\npassword = \"x\"\n[[principals]]\nid = \"a\"\npassword = \"y\"\n",
		"listen and url":     "[nats]\nlisten = \"127.0.0.1:1\"\nurl = \"nats://x:4222\"\n",
		"tiny sweep":         "[nats]\nwatch_sweep_ms = 5\n",
		"bad prefix":         "subject_prefix = \"kp.*\"\n",
		"settings on system": "[state_store.settings.\"system\"]\n",
		"not TOML":           "data_dir = \n",
	} {
		if _, err := LoadConfig(writeConfig(t, body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A password written without its quotes is refused without its text: the error goes to the
	// terminal at start and to the log at a SIGHUP.
	for _, body := range []string{
		"[[principals]]\nid = \"alice\"\npassword = correcthorsebatterystaple\n",
		"[nats]\nurl = \"nats://127.0.0.1:4222\"\nuser = \"stated\"\npassword = correcthorsebatterystaple\n",
		"[[principals]]\nid = \"alice\"\npassword = correct horse\n",
	} {
		_, err := LoadConfig(writeConfig(t, body))
		if err == nil || strings.Contains(err.Error(), "correct") || !strings.Contains(err.Error(), "password") {
			t.Errorf("a password without quotes: %v, want an error naming the key and not its value", err)
		}
	}
	// An external server alone is fine: listen is dropped.
	c, err := LoadConfig(writeConfig(t, "[nats]\nurl = \"nats://127.0.0.1:4222\"\n"))
	if err != nil || c.NATS.Listen != "" {
		t.Fatalf("external NATS: %+v %v", c, err)
	}
}
