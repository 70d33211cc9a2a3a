package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

var (
	admin     = policy.Principal{ID: "coordinator", Admin: true}
	alice     = policy.Principal{ID: "alice"}
	bob       = policy.Principal{ID: "bob"}
	alice2    = policy.Principal{ID: "alice2"}
	transcode = policy.Principal{ID: "transcoder-a"} // a service's own principal, not admin
	ops       = policy.Principal{ID: "ops"}          // shares its id with a group
	aliceAdm  = policy.Principal{ID: "alice", Admin: true}
)

// TestPolicyTable is SPEC section 2's table, row by row.
func TestPolicyTable(t *testing.T) {
	for _, c := range []struct {
		p           policy.Principal
		ns          string
		read, write bool
	}{
		// system: nobody writes (the server itself only), admin reads.
		{admin, "system", true, false},
		{aliceAdm, "system", true, false},
		{alice, "system", false, false},
		{bob, "system", false, false},
		{transcode, "system", false, false},

		// service/<id>: admin only, read and write.
		{admin, "service/transcoder-a", true, true},
		{alice, "service/transcoder-a", false, false},
		{transcode, "service/transcoder-a", false, false},
		{bob, "service/x", false, false},

		// group/<id>: admin only.
		{admin, "group/ops", true, true},
		{ops, "group/ops", false, false},
		{alice, "group/ops", false, false},
		{alice, "group/alice", false, false},

		// user/<id>: the principal <id>, or admin.
		{alice, "user/alice", true, true},
		{admin, "user/alice", true, true},
		{aliceAdm, "user/alice", true, true},
		{bob, "user/alice", false, false},
		{alice2, "user/alice", false, false},
		{alice, "user/alice2", false, false},
		{alice, "user/bob", false, false},
		{transcode, "user/alice", false, false},
		{bob, "user/bob", true, true},
		{admin, "user/coordinator", true, true},
	} {
		name := c.p.ID
		if c.p.Admin {
			name += "(admin)"
		}
		if got := policy.CanRead(c.p, c.ns); got != c.read {
			t.Errorf("CanRead(%s, %s) = %v, want %v", name, c.ns, got, c.read)
		}
		if got := policy.CanWrite(c.p, c.ns); got != c.write {
			t.Errorf("CanWrite(%s, %s) = %v, want %v", name, c.ns, got, c.write)
		}
		checkDecision(t, "CheckRead", name, c.ns, policy.CheckRead(c.p, c.ns), c.read)
		checkDecision(t, "CheckWrite", name, c.ns, policy.CheckWrite(c.p, c.ns), c.write)
	}
}

func checkDecision(t *testing.T, fn, who, ns string, err error, allowed bool) {
	t.Helper()
	if allowed {
		if err != nil {
			t.Errorf("%s(%s, %s) = %v, want nil", fn, who, ns, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s(%s, %s) = nil, want PERMISSION_DENIED", fn, who, ns)
		return
	}
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodePermissionDenied || !errors.Is(err, wire.ErrPermissionDenied) ||
		wire.CodeOf(err) != wire.CodePermissionDenied {
		t.Errorf("%s(%s, %s) = %T %v, want a PERMISSION_DENIED *wire.Error", fn, who, ns, err, err)
		return
	}
	if we.CurrentRevision != nil || we.Message == "" {
		t.Errorf("%s(%s, %s) = %+v", fn, who, ns, we)
	}
	if errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrInvalidArgument) {
		t.Errorf("%s(%s, %s): %v matches another code", fn, who, ns, err)
	}
}

// An invalid namespace is denied to everybody, admin included: the policy fails closed.
func TestInvalidNamespaceDenied(t *testing.T) {
	for _, ns := range []string{
		"", "system/", "system/x", "foo/x", "service", "service/", "service/Bad", "user/", "user/alice/",
		"user/a/b", "user/Alice", "user/alice ", "/user/alice", "User/alice", "user//alice", "group/a.b",
		"user/" + strings.Repeat("a", 64),
	} {
		for _, p := range []policy.Principal{admin, alice, {ID: "Alice"}, {ID: "alice/"}, {}} {
			if policy.CanRead(p, ns) || policy.CanWrite(p, ns) {
				t.Errorf("%+v may read (%v) or write (%v) invalid namespace %q", p, policy.CanRead(p, ns), policy.CanWrite(p, ns), ns)
			}
			checkDecision(t, "CheckRead", p.ID, ns, policy.CheckRead(p, ns), false)
			checkDecision(t, "CheckWrite", p.ID, ns, policy.CheckWrite(p, ns), false)
		}
	}
}

// A principal whose id is not a valid principal id never matches a user namespace by id.
func TestInvalidPrincipalGetsNoUserNamespace(t *testing.T) {
	for _, p := range []policy.Principal{{ID: ""}, {ID: "Alice"}, {ID: "alice/x"}, {ID: "user/alice"}} {
		for _, ns := range []string{"user/alice", "user/x", "system", "service/alice"} {
			if policy.CanRead(p, ns) || policy.CanWrite(p, ns) {
				t.Errorf("%+v may use %s", p, ns)
			}
		}
	}
}

func TestPrincipalValidate(t *testing.T) {
	for _, p := range []policy.Principal{
		{ID: "a"}, {ID: "coordinator", Admin: true}, {ID: "alice"}, {ID: "transcoder-a"}, {ID: "a_b"},
		{ID: "0"}, {ID: "a" + strings.Repeat("b", 62)},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v", p, err)
		}
	}
	for _, p := range []policy.Principal{
		{}, {ID: "", Admin: true}, {ID: "Alice"}, {ID: "_a"}, {ID: "-a"}, {ID: "a.b"}, {ID: "a b"}, {ID: "a/b"},
		{ID: "a*"}, {ID: ">"}, {ID: "a" + strings.Repeat("b", 63)},
	} {
		err := p.Validate()
		if err == nil {
			t.Errorf("%+v: Validate() = nil", p)
			continue
		}
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeInvalidArgument || !errors.Is(err, wire.ErrInvalidArgument) {
			t.Errorf("%+v: Validate() = %T %v, want INVALID_ARGUMENT", p, err, err)
		}
	}
}

// Reading is never narrower than writing: whoever may write a namespace may also read it.
func TestWriteImpliesRead(t *testing.T) {
	for _, p := range []policy.Principal{admin, alice, bob, transcode, ops, {}} {
		for _, ns := range []string{"system", "service/transcoder-a", "group/ops", "user/alice", "user/bob", "user/ops", "foo/x"} {
			if policy.CanWrite(p, ns) && !policy.CanRead(p, ns) {
				t.Errorf("%+v may write but not read %s", p, ns)
			}
		}
	}
}

// A principal whose id is invalid may do nothing, even when it says it is an admin: the engine writes
// the principal as an entry's owner, and Open refuses a database with an invalid owner.
func TestInvalidAdminIsDeniedEverything(t *testing.T) {
	for _, p := range []policy.Principal{{Admin: true}, {ID: "Admin", Admin: true}, {ID: "a.b", Admin: true}, {ID: "a/b", Admin: true}} {
		for _, ns := range []string{"system", "service/tx", "group/g", "user/alice", "user/a"} {
			if policy.CanRead(p, ns) || policy.CanWrite(p, ns) {
				t.Errorf("%+v may read (%v) or write (%v) %s", p, policy.CanRead(p, ns), policy.CanWrite(p, ns), ns)
			}
		}
	}
}
