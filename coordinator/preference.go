package coordinator

import (
	"context"
	"encoding/json"

	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// Preference is the document of a keeppeek.preference.v1 entry: a display or audio preference of a
// user (in user/<id>) or a group (in group/<id>). Kind is required; the other fields are omitted when
// empty. A preference is a wish, not a fact: a preferred group grants no membership, no right to
// publish and no right to read that group's namespace. Group membership comes only from the group's
// own authoritative state after a successful join.
type Preference = wire.Preference

// SetPreference writes pref at key in the namespace user/<user>: the private namespace of a user,
// which that user (and any admin) may write. It is PutPreference on "user/"+user: a user principal
// may set its own preferences only (another user's is PERMISSION_DENIED).
func (c *Coordinator) SetPreference(ctx context.Context, user, key string, pref Preference) (wire.Entry, error) {
	if !wire.ValidPrincipalID(user) {
		return wire.Entry{}, wire.Errorf(wire.CodeInvalidArgument, "invalid user id %q", user)
	}
	return c.PutPreference(ctx, string(wire.KindUser)+"/"+user, key, pref)
}

// PutPreference writes pref at namespace/key, namespace a user/<id> or group/<id> namespace (only
// admins write group namespaces: anyone else gets PERMISSION_DENIED and nothing changes). pref is
// validated locally first (SCHEMA_INVALID from the registry), then written as PutIntent writes: create
// when missing, otherwise replace the whole document by compare-and-set, rereading and retrying on
// CONFLICT only. A key that holds another schema is ErrWrongSchema. An equal document is not
// written again.
func (c *Coordinator) PutPreference(ctx context.Context, namespace, key string, pref Preference) (wire.Entry, error) {
	if err := checkTarget(namespace, key); err != nil {
		return wire.Entry{}, err
	}
	doc, err := json.Marshal(&pref)
	if err != nil {
		return wire.Entry{}, err
	}
	if err := c.reg.Validate(schema.PreferenceV1, namespace, doc); err != nil {
		return wire.Entry{}, err
	}
	return c.write(ctx, namespace, key, schema.PreferenceV1, func(*wire.Entry) ([]byte, error) { return doc, nil })
}
