package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
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
