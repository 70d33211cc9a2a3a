package policy

import "github.com/keeppeek/coordination/store/wire"

// Principal is an authenticated identity. The server learns it from the NATS connection, never from a
// request body.
type Principal struct {
	ID    string
	Admin bool
}

// Validate reports an invalid principal id.
func (p Principal) Validate() error {
	if !wire.ValidPrincipalID(p.ID) {
		return wire.Errorf(wire.CodeInvalidArgument, "invalid principal id %q", p.ID)
	}
	return nil
}

// CanRead reports whether p may get, list and watch ns, and receive its watch deliveries. A principal
// whose id is not a valid principal id may do nothing, admin or not: the policy fails closed, and no
// entry or audit record is ever written under an owner that the store would refuse when it opens.
func CanRead(p Principal, ns string) bool {
	kind, id, ok := wire.ParseNamespace(ns)
	if !ok || !wire.ValidPrincipalID(p.ID) {
		return false
	}
	switch kind {
	case wire.KindSystem, wire.KindService, wire.KindGroup:
		return p.Admin
	case wire.KindUser:
		return p.Admin || p.ID == id
	}
	return false
}

// CanWrite reports whether p may put and delete in ns. Nobody writes system: the server does, through
// the engine's internal call. A principal whose id is not valid may write nothing (see CanRead).
func CanWrite(p Principal, ns string) bool {
	kind, id, ok := wire.ParseNamespace(ns)
	if !ok || !wire.ValidPrincipalID(p.ID) {
		return false
	}
	switch kind {
	case wire.KindSystem:
		return false
	case wire.KindService, wire.KindGroup:
		return p.Admin
	case wire.KindUser:
		return p.Admin || p.ID == id
	}
	return false
}

// CheckRead returns PERMISSION_DENIED unless p may read ns.
func CheckRead(p Principal, ns string) error {
	if !CanRead(p, ns) {
		return wire.Errorf(wire.CodePermissionDenied, "principal %q may not read %s", p.ID, ns)
	}
	return nil
}

// CheckWrite returns PERMISSION_DENIED unless p may write ns.
func CheckWrite(p Principal, ns string) error {
	if !CanWrite(p, ns) {
		return wire.Errorf(wire.CodePermissionDenied, "principal %q may not write %s", p.ID, ns)
	}
	return nil
}
