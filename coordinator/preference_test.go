package coordinator

import (
	"bytes"
	"errors"
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// Scenario 6 of the seed: a group client persists a preferred group in its own user namespace, and
// that grants it nothing.
func TestSetPreference(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newCoordinator(t, env, "coordinator")
	alice := newCoordinator(t, env, "alice")
	ctx := ctxT(t)

	pref := Preference{Kind: "group", PreferredGroup: "lobby", Layout: "grid-2x2", AudioDevice: "usb-headset"}
	e, err := alice.SetPreference(ctx, "alice", "prefs/group", pref)
	if err != nil {
		t.Fatalf("alice's own preference: %v", err)
	}
	if e.Namespace != "user/alice" || e.Owner != "alice" || e.Schema != schema.PreferenceV1 ||
		string(e.Document) != `{"kind":"group","preferred_group":"lobby","layout":"grid-2x2","audio_device":"usb-headset"}` {
		t.Fatalf("stored preference %+v %s", e, e.Document)
	}
	pref.Layout = "speaker"
	e2, err := alice.SetPreference(ctx, "alice", "prefs/group", pref)
	if err != nil || e2.Revision != e.Revision+1 || !bytes.Contains(e2.Document, []byte(`"layout":"speaker"`)) {
		t.Fatalf("replace: %+v, %v", e2, err)
	}

	// The group's shared state, written by an admin.
	shared, err := admin.PutPreference(ctx, "group/lobby", "prefs/layout", Preference{Kind: "display", Layout: "grid-3x3"})
	if err != nil {
		t.Fatalf("admin group preference: %v", err)
	}

	// The preference grants no membership: alice still cannot read or write the group's namespace,
	// nor a service's, nor bob's.
	if _, err := alice.Client().Get(ctx, "group/lobby", "prefs/layout"); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("alice reads group/lobby: %v", err)
	}
	_, err = alice.PutPreference(ctx, "group/lobby", "prefs/layout", Preference{Kind: "display", Layout: "mine"})
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("alice writes group/lobby: %v", err)
	}
	_, err = alice.PutPreference(ctx, "group/lobby", "prefs/new", Preference{Kind: "display"})
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("alice creates in group/lobby: %v", err)
	}
	_, err = alice.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("alice writes an intent in %s: %v", svcNS, err)
	}
	_, err = alice.SetPreference(ctx, "bob", "prefs/group", pref)
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("alice writes user/bob: %v", err)
	}
	_, err = alice.Fleet(ctx)
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("alice reads the fleet: %v", err)
	}
	if v, err := alice.WatchFleet(ctx); !errors.Is(err, wire.ErrPermissionDenied) {
		if v != nil {
			_ = v.Close()
		}
		t.Fatalf("alice watches the fleet: %v", err)
	}

	// Nothing changed.
	if got := mustGet(t, admin, "group/lobby", "prefs/layout"); got.Revision != shared.Revision || !bytes.Equal(got.Document, shared.Document) {
		t.Fatalf("group preference changed: %+v", got)
	}
	for _, k := range []struct{ ns, key string }{{"group/lobby", "prefs/new"}, {svcNS, intentKey}, {"user/bob", "prefs/group"}} {
		if _, err := admin.Client().Get(ctx, k.ns, k.key); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("%s:%s after a denied write: %v", k.ns, k.key, err)
		}
	}

	// Local validation: a PEM block, a schema outside its namespaces, a malformed user.
	_, err = alice.SetPreference(ctx, "alice", "prefs/group", Preference{Kind: "display", Layout: "-----BEGIN PRIVATE KEY-----"})
	wantCode(t, err, wire.CodeSchemaInvalid, "PEM in a preference")
	_, err = admin.PutPreference(ctx, svcNS, "prefs/x", Preference{Kind: "display"})
	wantCode(t, err, wire.CodeSchemaInvalid, "preference in a service namespace")
	_, err = alice.SetPreference(ctx, "Alice!", "prefs/x", Preference{Kind: "display"})
	wantCode(t, err, wire.CodeInvalidArgument, "malformed user")
	if got := mustGet(t, alice, "user/alice", "prefs/group"); got.Revision != e2.Revision {
		t.Fatalf("a rejected preference changed the entry: %+v", got)
	}
}
