package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// ErrWrongSchema is wrapped by the error of a write or delete that found the key holding an entry of
// another schema than the one the call writes (a lease, an observed status, ...). The coordinator
// never replaces or deletes such an entry; delete it with the store client if that is really meant.
var ErrWrongSchema = errors.New("coordinator: the key holds an entry of another schema")

// Coordinator writes desired state and reads the worker fleet for the principal of its client.
// It is safe for concurrent use; several Coordinators (in one process or many) may write the same
// keys, and no update of one is lost to another. The zero Coordinator is not usable: make one with
// New.
type Coordinator struct {
	client *client.Client
	reg    *schema.Registry
	log    *slog.Logger
	// pageLimit is the list page size of Fleet (wire.MaxListLimit; tests lower it to exercise paging).
	pageLimit int64
}

// Option configures a Coordinator.
type Option func(*options)

type options struct {
	reg *schema.Registry
	log *slog.Logger
}

// WithRegistry makes the Coordinator validate with reg instead of compiling its own registry, so
// that several Coordinators of one process share one. Default: schema.New(), compiled once by New.
func WithRegistry(reg *schema.Registry) Option { return func(o *options) { o.reg = reg } }

// WithLogger sets the logger (default, and with nil: discard). A FleetView logs worker entries it cannot decode.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// New returns a Coordinator that writes and reads through c, as c's principal. It compiles the schema
// registry used for local validation once (unless WithRegistry gives one). A nil Option is ignored,
// as are WithRegistry(nil) and WithLogger(nil) (the defaults stay). A nil c is an error. New sends
// nothing: a principal's rights are checked by the store at each call.
// Intents in service/<id> namespaces, preferences in group/<id> namespaces and the fleet view need an
// admin principal.
func New(c *client.Client, opts ...Option) (*Coordinator, error) {
	if c == nil {
		return nil, errors.New("coordinator: nil client")
	}
	var o options
	for _, opt := range opts {
		if opt != nil { // a nil Option sets nothing, as WithRegistry(nil) and WithLogger(nil) set nothing
			opt(&o)
		}
	}
	if o.reg == nil {
		reg, err := schema.New()
		if err != nil {
			return nil, fmt.Errorf("coordinator: schema registry: %w", err)
		}
		o.reg = reg
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{client: c, reg: o.reg, log: o.log, pageLimit: wire.MaxListLimit}, nil
}

// Client returns the store client the Coordinator uses.
func (c *Coordinator) Client() *client.Client { return c.client }

// checkTarget checks namespace and key the way the server's first two checks do (SPEC section 5), so
// that a malformed target is INVALID_ARGUMENT, and a write in system PERMISSION_DENIED (nobody writes
// it, not even an admin: SPEC section 2), without a round trip and before the registry could call the
// document SCHEMA_INVALID for its namespace.
func checkTarget(namespace, key string) error {
	if !wire.ValidNamespace(namespace) {
		return wire.Errorf(wire.CodeInvalidArgument, "invalid namespace %q", namespace)
	}
	if !wire.ValidKey(key) {
		return wire.Errorf(wire.CodeInvalidArgument, "invalid key %q", key)
	}
	return checkWritable(namespace)
}

// checkWritable answers, for a valid namespace, what the server's policy check answers every
// principal: PERMISSION_DENIED in system. Whether the principal may write another namespace depends
// on its admin right, which only the server knows.
func checkWritable(namespace string) error {
	if namespace == string(wire.KindSystem) {
		return wire.Errorf(wire.CodePermissionDenied, "nobody writes the system namespace (the state server keeps it)")
	}
	return nil
}

// write is the reread-merge-retry put of one document of schemaID at namespace/key, on
// client.Update. Each round, build gets the current entry (nil when the key is missing), already
// checked to hold schemaID, and returns the whole new document, or nil for "no change". The document
// is validated locally before it is sent; one equal to what is stored (same bytes, written by this
// principal, without a lease) is not written again, so an idempotent call does not wake every
// watcher. Only CONFLICT is retried.
func (c *Coordinator) write(ctx context.Context, namespace, key, schemaID string, build func(cur *wire.Entry) ([]byte, error)) (wire.Entry, error) {
	return c.client.Update(ctx, namespace, key, func(cur *wire.Entry) (*wire.PutRequest, error) {
		if cur != nil && cur.Schema != schemaID {
			return nil, wrongSchema(cur, schemaID)
		}
		doc, err := build(cur)
		if err != nil || doc == nil {
			return nil, err
		}
		if err := c.reg.Validate(schemaID, namespace, doc); err != nil {
			return nil, err
		}
		if cur != nil && cur.Owner == c.client.Principal() && cur.TTLMs == 0 && bytes.Equal(cur.Document, doc) {
			return nil, nil
		}
		return &wire.PutRequest{Schema: schemaID, Document: doc}, nil
	})
}

func wrongSchema(e *wire.Entry, want string) error {
	return fmt.Errorf("coordinator: %s has schema %s, not %s: %w", e.String(), e.Schema, want, ErrWrongSchema)
}
