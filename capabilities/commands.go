package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// SubscribeRequest is the body of subscribe. VariantID empty asks for the stream's original variant.
type SubscribeRequest struct {
	SessionID string `json:"session_id"`
	StreamID  string `json:"stream_id"`
	VariantID string `json:"variant_id,omitempty"`
}

// SubscribeReply is the result of subscribe: the subscription and the variant actually bound.
type SubscribeReply struct {
	SubscriptionID string `json:"subscription_id"`
	VariantID      string `json:"variant_id"`
}

// UnsubscribeRequest is the body of unsubscribe.
type UnsubscribeRequest struct {
	SubscriptionID string `json:"subscription_id"`
}

// StartPublicationRequest is the body of start_publication. Every field is required; RecordingMode is
// one of inherit, disabled and required (copied from the publish intent).
type StartPublicationRequest struct {
	SessionID     string `json:"session_id"`
	StreamID      string `json:"stream_id"`
	VariantID     string `json:"variant_id"`
	OutputProfile string `json:"output_profile"`
	RecordingMode string `json:"recording_mode"`
}

// StartPublicationReply is the result of start_publication. The variant then shows in the capabilities
// as PENDING with the principal as publisher, and later READY or FAILED.
type StartPublicationReply struct {
	PublicationID string `json:"publication_id"`
	VariantID     string `json:"variant_id"`
}

// StopPublicationRequest is the body of stop_publication.
type StopPublicationRequest struct {
	PublicationID string `json:"publication_id"`
}

// Reply is the envelope of every media command reply, a flat JSON object:
//
//	{"ok": true, "subscription_id": "...", "variant_id": "..."}       subscribe
//	{"ok": true, "publication_id": "...", "variant_id": "..."}        start_publication
//	{"ok": true}                                                      unsubscribe, stop_publication
//	{"ok": false, "error": {"code": "PUBLICATION_ERROR_CODE_CONFLICT", "message": "..."}}
//
// A reply is either ok with the command's result fields or not ok with an error object; never both.
// The simulator answers so, and repeats an error's code and message at the top level, as SPEC
// section 12 writes errors, for clients that know no envelope. Commands also reads the replies as
// SPEC section 12 writes them, without the envelope: a bare result ({"subscription_id": ...,
// "variant_id": ...}, {} for unsubscribe and stop_publication) and a bare error ({"code": ...,
// "message": ...}).
type Reply struct {
	OK             bool   `json:"ok"`
	Error          *Error `json:"error,omitempty"`
	SubscriptionID string `json:"subscription_id,omitempty"`
	PublicationID  string `json:"publication_id,omitempty"`
	VariantID      string `json:"variant_id,omitempty"`
}

// ErrorReply returns the failed reply carrying err.
func ErrorReply(err *Error) Reply { return Reply{Error: err} }

// DefaultRequestTimeout bounds a command or a capability fetch whose context has no deadline.
const DefaultRequestTimeout = 5 * time.Second

type commandOptions struct {
	prefix  string
	timeout time.Duration
}

// Option configures Commands.
type Option func(*commandOptions)

// WithPrefix sets the subject prefix (default DefaultPrefix, "kp").
func WithPrefix(prefix string) Option { return func(o *commandOptions) { o.prefix = prefix } }

// WithRequestTimeout sets how long a command may take when its context has no deadline (default
// DefaultRequestTimeout). A context deadline always wins.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *commandOptions) { o.timeout = d }
}

// Commands sends media commands as one principal. The media server takes the principal from the
// subject token, which NATS permits only to that principal's user, so nc must be authenticated as
// principal (and, under the state server's permissions, use the inbox prefix `_INBOX.<principal>`).
// Subscribe and StartPublication are not sent while nc is disconnected: they fail at once, wrapping
// nats.ErrConnectionReconnecting, rather than wait in nats.go's reconnect buffer and reach the media
// server after their caller gave up. It is safe for concurrent use.
type Commands struct {
	nc        *nats.Conn
	principal string
	prefix    string
	timeout   time.Duration
	lateWait  time.Duration // LateAnswerWait; tests shorten it
}

// NewCommands returns a media command client acting as principal over nc.
func NewCommands(nc *nats.Conn, principal string, opts ...Option) (*Commands, error) {
	if nc == nil {
		return nil, errors.New("capabilities: nil NATS connection")
	}
	if !ValidPrincipal(principal) {
		return nil, fmt.Errorf("capabilities: invalid principal id %q", principal)
	}
	o := commandOptions{prefix: DefaultPrefix, timeout: DefaultRequestTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if !ValidPrefix(o.prefix) {
		return nil, fmt.Errorf("capabilities: invalid subject prefix %q", o.prefix)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("capabilities: request timeout must be positive, got %v", o.timeout)
	}
	return &Commands{nc: nc, principal: principal, prefix: o.prefix, timeout: o.timeout, lateWait: LateAnswerWait}, nil
}

// Principal returns the principal the commands are sent as.
func (c *Commands) Principal() string { return c.principal }

// Subscribe subscribes to a variant of a stream of the source session. Errors: ErrSourceUnavailable
// (stale session, offline source), ErrVariantNotReady (no such variant or not READY),
// ErrInvalidArgument. A subscribe whose ctx ends (or whose connection is lost) before its answer
// comes returns that error, but the media server may still carry it out: the subscription is then
// left, and nobody knows its id to end it. A caller that may give up uses SubscribeOrUndo.
func (c *Commands) Subscribe(ctx context.Context, req SubscribeRequest) (SubscribeReply, error) {
	rep, err := c.subscribe(ctx, req)
	if err != nil {
		return SubscribeReply{}, err
	}
	return rep, nil
}

// subscribe is Subscribe, except that an ok reply lacking its variant_id comes back with the error
// and the subscription_id it names, for SubscribeOrUndo to end.
func (c *Commands) subscribe(ctx context.Context, req SubscribeRequest) (SubscribeReply, error) {
	r, err := c.call(ctx, CommandSubscribe, req)
	if err != nil {
		return SubscribeReply{}, err
	}
	rep := SubscribeReply{SubscriptionID: r.SubscriptionID, VariantID: r.VariantID}
	if r.SubscriptionID == "" || r.VariantID == "" {
		return rep, fmt.Errorf("capabilities: subscribe reply lacks subscription_id or variant_id (%+v)", rep)
	}
	return rep, nil
}

// Unsubscribe ends a subscription. ErrSubscriptionNotFound when the principal holds no such
// subscription (already ended, or ended by the server when its source went offline).
func (c *Commands) Unsubscribe(ctx context.Context, subscriptionID string) error {
	_, err := c.call(ctx, CommandUnsubscribe, UnsubscribeRequest{SubscriptionID: subscriptionID})
	return err
}

// StartPublication asks the media server to publish a variant. A RecordingMode that is empty or not
// one of inherit, disabled and required is refused here with ErrRecordingModeInvalid and nothing is
// sent. Server errors: ErrRecordingModeInvalid (a mode the source does not allow),
// ErrSourceUnavailable, ErrPublicationConflict (another publisher owns the variant),
// ErrInvalidArgument. Starting a variant the principal already publishes takes it over: the reply
// carries a new publication id and the old one is gone (on the simulator, the variant is PENDING
// again and the subscriptions to it end). A start whose ctx ends (or whose connection is lost)
// before its answer comes may still be carried out, its publication holding the variant with nobody
// knowing its id: a caller that may give up uses StartPublicationOrUndo.
func (c *Commands) StartPublication(ctx context.Context, req StartPublicationRequest) (StartPublicationReply, error) {
	rep, err := c.startPublication(ctx, req)
	if err != nil {
		return StartPublicationReply{}, err
	}
	return rep, nil
}

// startPublication is StartPublication, except that an ok reply lacking its variant_id comes back
// with the error and the publication_id it names, for StartPublicationOrUndo to stop.
func (c *Commands) startPublication(ctx context.Context, req StartPublicationRequest) (StartPublicationReply, error) {
	if !ValidRecordingMode(req.RecordingMode) {
		return StartPublicationReply{}, Errorf(CodeRecordingModeInvalid,
			"recording_mode %q is not one of inherit, disabled, required (not sent)", req.RecordingMode)
	}
	r, err := c.call(ctx, CommandStartPublication, req)
	if err != nil {
		return StartPublicationReply{}, err
	}
	rep := StartPublicationReply{PublicationID: r.PublicationID, VariantID: r.VariantID}
	if r.PublicationID == "" || r.VariantID == "" {
		return rep, fmt.Errorf("capabilities: start_publication reply lacks publication_id or variant_id (%+v)", rep)
	}
	return rep, nil
}

// StopPublication ends a publication; its variant leaves the capabilities. ErrPublicationNotFound when
// the principal holds no such publication (already stopped, taken over, or ended by the server when
// its source went offline).
func (c *Commands) StopPublication(ctx context.Context, publicationID string) error {
	_, err := c.call(ctx, CommandStopPublication, StopPublicationRequest{PublicationID: publicationID})
	return err
}

// call sends body as cmd and returns the ok reply, the reply's *Error, or a transport or protocol
// error (wrapped; no media server answering wraps nats.ErrNoResponders; a subscribe or
// start_publication while the connection is down is not sent and wraps nats.ErrConnectionReconnecting).
func (c *Commands) call(ctx context.Context, cmd Command, body any) (Reply, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return Reply{}, fmt.Errorf("capabilities: encode %s: %w", cmd, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	subj := CommandSubject(c.prefix, c.principal, cmd)
	if (cmd == CommandSubscribe || cmd == CommandStartPublication) && !c.nc.IsConnected() {
		// nats.go keeps what is published while the connection is down in its reconnect buffer and
		// sends it once the connection is back, maybe long after the caller gave up: the media server
		// would then make a subscription or a publication nobody knows of, which holds its variant
		// for good. A command that makes something is therefore sent only over a connection that is
		// up (a connection lost between this check and the send still buffers it: connect with
		// nats.ReconnectBufSize(-1), as store/client.Connect does, to close that gap). unsubscribe and
		// stop_publication name what they end and are harmless late, so they may wait in the buffer.
		down := nats.ErrConnectionReconnecting
		if c.nc.IsClosed() {
			down = nats.ErrConnectionClosed
		}
		return Reply{}, fmt.Errorf("capabilities: %s not sent on %s: the NATS connection is down: %w", cmd, subj, down)
	}
	if err := ctx.Err(); err != nil {
		return Reply{}, fmt.Errorf("capabilities: %s not sent on %s: %w", cmd, subj, err)
	}
	msg, err := c.nc.RequestWithContext(ctx, subj, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return Reply{}, fmt.Errorf("capabilities: no media server answered on %s: %w", subj, err)
		}
		err = fmt.Errorf("capabilities: %s on %s: %w", cmd, subj, err)
		if unanswered(err) {
			err = &noAnswerError{err}
		}
		return Reply{}, err
	}
	return decodeReply(cmd, msg.Data)
}

// unanswered reports whether err, the error of a request that was sent, means that no answer came
// (its wait ended, or the connection was lost or closed while it waited) rather than that the
// request never left: the media server may then have received it and carried it out. A connection
// closed just before the send reads so too: a report too many, never one too few.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionClosed)
}

// noAnswerError is the error of a command sent and never answered: whether the media server carried
// it out is unknown.
type noAnswerError struct{ err error }

func (e *noAnswerError) Error() string { return e.err.Error() }
func (e *noAnswerError) Unwrap() error { return e.err }

// decodeReply reads a command reply: the envelope of Reply (its error also flat, {"ok": false,
// "code": ..., "message": ...}), or, without "ok", a bare error ({code, message}, or {error: {code,
// message}}) or a bare result. Anything else (not a JSON object, not ok without an error code, ok
// with an error, a bare error without a code) is a protocol error, never a success.
func decodeReply(cmd Command, data []byte) (Reply, error) {
	var r struct {
		Reply
		OK      *bool            `json:"ok"`
		Code    *json.RawMessage `json:"code"`
		Message *json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return Reply{}, fmt.Errorf("capabilities: malformed %s reply: %v", cmd, err)
	}
	if !isJSONObject(data) {
		return Reply{}, fmt.Errorf("capabilities: malformed %s reply: not a JSON object (%.64q)", cmd, data)
	}
	// A flat error: "code", or a "message" without any result field, beside (or instead of) "ok".
	// Without a code it says that something failed, not what: a protocol error, never a bare result.
	var flat *Error
	result := r.SubscriptionID != "" || r.PublicationID != "" || r.VariantID != ""
	if r.Code != nil || (r.Message != nil && !result) {
		var e Error
		if err := json.Unmarshal(data, &e); err != nil {
			return Reply{}, fmt.Errorf("capabilities: malformed %s reply: %v", cmd, err)
		}
		flat = &e
	}
	switch {
	case r.OK != nil:
		r.Reply.OK = *r.OK
		if r.Error == nil && flat != nil && flat.Code != "" {
			r.Error = flat // beside "ok": true too, which checkReply refuses (ok with an error)
		}
	case r.Error != nil: // no envelope: SPEC section 12's bare reply
		r.Reply.OK = false
	case flat != nil:
		r.Reply.OK, r.Error = false, flat
	default:
		r.Reply.OK = true
	}
	return checkReply(cmd, r.Reply)
}

// checkReply returns the ok reply r, its *Error, or a protocol error.
func checkReply(cmd Command, r Reply) (Reply, error) {
	if !r.OK {
		if r.Error == nil || r.Error.Code == "" {
			return Reply{}, fmt.Errorf("capabilities: %s reply is not ok and carries no error", cmd)
		}
		return Reply{}, r.Error
	}
	if r.Error != nil {
		return Reply{}, fmt.Errorf("capabilities: %s reply is ok and carries an error (%v)", cmd, r.Error)
	}
	return r, nil
}
