package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/nats-io/nkeys"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The README's commands, as written (the flags after the command's arguments), write what they say.
func TestREADMECommands(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	conn := []string{"--nats-url", env.URL, "--user", "coordinator"}
	cmd := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		if code := run(ctx, append(args, conn...), &out, &errOut); code != 0 {
			t.Fatalf("coordinator %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	intent := func(ns, key string) wire.MediaIntent {
		t.Helper()
		e, err := admin.Get(t.Context(), ns, key)
		if err != nil {
			t.Fatalf("get %s %s: %v", ns, key, err)
		}
		var in wire.MediaIntent
		if err := json.Unmarshal(e.Document, &in); err != nil {
			t.Fatal(err)
		}
		return in
	}

	cmd("publish", "front-door", "--variant", "browser-h264-480p", "--recording-mode", "required")
	pub := intent("service/transcoder-a", "intents/front-door-video-browser-h264-480p")
	if pub.VariantID != "browser-h264-480p" || pub.OutputProfile != "browser-h264-480p" || pub.RecordingMode != "required" || !pub.Desired {
		t.Fatalf("publish intent %+v: the flags after the source were not applied", pub)
	}

	cmd("model", "front-door", "--service", "cv-a", "--variant", "browser-h264-480p", "--model", "person-detector")
	model := intent("service/cv-a", "intents/front-door-person-detector")
	if model.VariantID != "browser-h264-480p" || !strings.Contains(string(model.Parameters["cv-a"]), "person-detector") {
		t.Fatalf("model intent %+v", model)
	}

	cmd("desired", "service/transcoder-a", "intents/front-door-video-browser-h264-480p", "false")
	if in := intent("service/transcoder-a", "intents/front-door-video-browser-h264-480p"); in.Desired {
		t.Fatalf("intent still desired: %+v", in)
	}
	if out := cmd("fleet"); !strings.Contains(out, "PRINCIPAL") {
		t.Fatalf("fleet: %q", out)
	}
	cmd("delete", "service/cv-a", "intents/front-door-person-detector")
	if _, err := admin.Get(t.Context(), "service/cv-a", "intents/front-door-person-detector"); err == nil {
		t.Fatal("intent not deleted")
	}
}

// A malformed command is a usage error (exit 2), found before anything is sent: the NATS address
// here leads nowhere, so a connection attempt would be exit 1.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{}, {"publish"}, {"publish", "a", "b"}, {"model", "front-door"}, {"delete", "service/x"}, {"nope"},
		{"--no-such-flag", "fleet"}, {"desired", "service/x", "intents/y", "maybe"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append(args, "--nats-url", "nats://127.0.0.1:1"), &out, &errOut); code != 2 {
			t.Errorf("coordinator %q: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

// Flags and arguments whose write the store would refuse, and connection flags that cannot work, are
// bad usage too (exit 2, naming what is wrong), found before anything connects: they were sent (or
// dialled) first and ended with exit 1, as for a failure at run time. The NATS address here leads
// nowhere, so a connection attempt would be exit 1.
func TestBadValuesAreUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet", "--user", "BAD"}, "--user"},
		{[]string{"publish", "front door"}, "key"},
		{[]string{"publish", "x", "--recording-mode", "bogus"}, "recording_mode"},
		{[]string{"publish", "x", "--kind", "nope"}, "media_kind"},
		{[]string{"publish", "x", "--service", "BAD"}, "namespace"},
		{[]string{"publish", "x", "--variant", "a b"}, "key"},
		{[]string{"model", "x", "--model", "bad model"}, "key"},
		{[]string{"delete", "bad-ns", "k"}, "namespace"},
		{[]string{"desired", "service/x", "bad key", "true"}, "key"},
		{[]string{"fleet", "--nkey", "/nonexistent", "--password", "x"}, "--nkey and --password"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append(c.args, "--nats-url", "nats://127.0.0.1:1"), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("coordinator %q: exit %d, want 2 naming %s (%s)", c.args, code, c.want, errOut.String())
		}
	}
	for _, url := range []string{"nats://127.0.0.1:99999", "http://127.0.0.1:1"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"fleet", "--nats-url", url}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--nats-url") {
			t.Errorf("coordinator fleet --nats-url %s: exit %d, want 2 naming --nats-url (%s)", url, code, errOut.String())
		}
	}
}

// The usage (for -h and for a mistyped flag) never shows the password taken from KP_PASSWORD: it was
// the --password flag's default, printed on a terminal or into a log. The password is still the one
// KP_PASSWORD names when no --password is given.
func TestUsageHidesThePassword(t *testing.T) {
	const secret = "s3cret-from-the-environment"
	t.Setenv("KP_PASSWORD", secret)
	for _, args := range [][]string{{"-h"}, {"--no-such-flag", "fleet"}} {
		var out, errOut bytes.Buffer
		run(context.Background(), append(args, "--nats-url", "nats://127.0.0.1:1"), &out, &errOut)
		if !strings.Contains(errOut.String(), "-password") {
			t.Fatalf("coordinator %q printed no usage:\n%s", args, errOut.String())
		}
		if strings.Contains(out.String()+errOut.String(), secret) {
			t.Fatalf("coordinator %q shows KP_PASSWORD:\n%s", args, errOut.String())
		}
	}

	// KP_PASSWORD is KP_USER's: with both set, the command logs in as that user.
	t.Setenv("KP_USER", "coordinator")
	env := testenv.Start(t, testenv.Options{NATSUsers: []natsserver.User{{Name: "coordinator", Password: secret}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"fleet", "--nats-url", env.URL, "--user", "coordinator"}, &out, &errOut); code != 0 {
		t.Fatalf("fleet with the password of KP_PASSWORD: exit %d: %s", code, errOut.String())
	}
}

// A principal configured with an nkey (SPEC 14) signs in with --nkey FILE (its seed), or KP_NKEY for
// KP_USER's principal; the examples could send only a password, so such a principal could not run
// them. --nkey with --password is refused; a seed file that is not one names the flag.
func TestNkeyLogin(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "coordinator.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{NATSUsers: []natsserver.User{{Name: "coordinator", Nkey: pub}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fleet := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"fleet", "--nats-url", env.URL, "--user", "coordinator"}, args...), &out, &errOut)
		return code, errOut.String()
	}
	if code, errs := fleet("--nkey", seedFile); code != 0 {
		t.Fatalf("fleet with --nkey: exit %d: %s", code, errs)
	}
	if code, errs := fleet("--password", "x"); code == 0 || !strings.Contains(errs, "uthorization") {
		t.Fatalf("a password for an nkey principal: exit %d: %s", code, errs)
	}
	t.Setenv("KP_USER", "coordinator")
	t.Setenv("KP_NKEY", seedFile)
	if code, errs := fleet(); code != 0 {
		t.Fatalf("fleet with KP_NKEY: exit %d: %s", code, errs)
	}
	if code, errs := fleet("--nkey", seedFile, "--password", "x"); code == 0 || !strings.Contains(errs, "--nkey and --password") {
		t.Fatalf("--nkey with --password: exit %d: %s", code, errs)
	}
	if code, errs := fleet("--nkey", filepath.Join(t.TempDir(), "missing.nk")); code == 0 || !strings.Contains(errs, "--nkey") {
		t.Fatalf("a missing seed file: exit %d: %s", code, errs)
	}
}
