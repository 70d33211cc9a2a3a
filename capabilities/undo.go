package capabilities

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LateAnswerWait bounds how long SubscribeOrUndo and StartPublicationOrUndo follow a command they
// gave up on to its answer (counted from the send, and never less than the caller's own wait).
const LateAnswerWait = time.Minute

// SubscribeOrUndo is Subscribe for a caller that may stop waiting: it waits for the answer as long
// as ctx allows, at most the request timeout. A subscribe given up on is not forgotten: the media
// server still makes the subscription when it gets to it, and nobody would know to end it (each
// retry would add one more). It is followed to its answer, for LateAnswerWait at most, and the
// subscription a late answer names is ended, as is one named by an answer that fails for lacking
// its variant_id; a failure to end it goes to onUndoErr (nil: dropped).
//
// A subscribe sent and never answered (the answer lost with a connection that dropped, the
// connection closed while it waited, no answer within LateAnswerWait) may have been carried out,
// and its subscription, whose id nobody learnt, cannot be ended: it is left behind. onUndoErr
// hears of that too, once, whether the caller had given up or got the transport error itself.
// Nothing is reported for a subscribe that never left (ctx already done, the connection down, no
// media server subscribed: nats.ErrNoResponders) or that was refused.
func (c *Commands) SubscribeOrUndo(ctx context.Context, req SubscribeRequest, onUndoErr func(error)) (SubscribeReply, error) {
	return orUndo(ctx, c.timeout, c.lateWait, CommandSubscribe,
		func(ctx context.Context) (SubscribeReply, error) { return c.subscribe(ctx, req) },
		func(rep SubscribeReply) bool { return rep.SubscriptionID != "" },
		func(ctx context.Context, rep SubscribeReply) error {
			if err := c.Unsubscribe(ctx, rep.SubscriptionID); err != nil && !errors.Is(err, ErrSubscriptionNotFound) {
				return fmt.Errorf("capabilities: subscription %s, answered after the subscribe was given up on or incompletely, not ended: %w", rep.SubscriptionID, err)
			}
			return nil
		}, onUndoErr)
}

// StartPublicationOrUndo is StartPublication for a caller that may stop waiting, as SubscribeOrUndo
// is Subscribe's: the publication a late answer names (or an answer that fails for lacking its
// variant_id) is stopped by its id (one a later start took over already is not found, which is
// fine), or it would hold its variant for good. A start never answered is reported to onUndoErr as
// SubscribeOrUndo reports a subscribe: the publication it may have made holds its variant, with the
// principal as publisher, until the principal starts that variant again (a takeover ends it).
func (c *Commands) StartPublicationOrUndo(ctx context.Context, req StartPublicationRequest, onUndoErr func(error)) (StartPublicationReply, error) {
	return orUndo(ctx, c.timeout, c.lateWait, CommandStartPublication,
		func(ctx context.Context) (StartPublicationReply, error) { return c.startPublication(ctx, req) },
		func(rep StartPublicationReply) bool { return rep.PublicationID != "" },
		func(ctx context.Context, rep StartPublicationReply) error {
			if err := c.StopPublication(ctx, rep.PublicationID); err != nil && !errors.Is(err, ErrPublicationNotFound) {
				return fmt.Errorf("capabilities: publication %s, answered after the start was given up on or incompletely, not stopped: %w", rep.PublicationID, err)
			}
			return nil
		}, onUndoErr)
}

// orUndo runs do, waiting for its answer while ctx allows and at most timeout; an answer that comes
// after that, within lateWait, is undone, as is one that fails while naming what it made (made
// tells; do returns such a reply with its error). A command sent and never answered (a
// *noAnswerError) is reported to onUndoErr: what it may have made cannot be undone.
func orUndo[R any](ctx context.Context, timeout, lateWait time.Duration, cmd Command, do func(context.Context) (R, error),
	made func(R) bool, undo func(context.Context, R) error, onUndoErr func(error)) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	// The request timeout bounds the wait even under a later deadline: a context that allows an hour
	// does not make the caller wait an hour for a media server that is slow or gone; the answer, when
	// it comes, is undone.
	wait := timeout
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	type answer struct {
		rep R
		err error
	}
	done := make(chan answer, 1)
	// The follow-up never cuts the caller's own wait short (a request timeout above LateAnswerWait).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(lateWait, wait))
	go func() {
		defer cancel()
		rep, err := do(rctx)
		done <- answer{rep, err}
	}()
	undoLater := func(a answer) {
		var uerr error
		var noAnswer *noAnswerError
		switch {
		case made(a.rep):
			uctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			uerr = undo(uctx, a.rep)
		case errors.As(a.err, &noAnswer):
			// Sent, and no answer came: the media server may have carried it out, and what it made,
			// whose id nobody learnt, cannot be ended. It is reported, never dropped in silence.
			uerr = fmt.Errorf("capabilities: %s never answered, so the %s it may have made is left behind, its id unknown: %w",
				cmd, madeNoun(cmd), a.err)
		}
		if uerr != nil && onUndoErr != nil {
			onUndoErr(uerr)
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case a := <-done:
		if a.err != nil {
			go undoLater(a) // an ok reply that names what it made but lacks the rest
			return zero, a.err
		}
		return a.rep, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = fmt.Errorf("capabilities: %s: no answer within %v: %w", cmd, wait, context.DeadlineExceeded)
	}
	go func() { undoLater(<-done) }()
	return zero, err
}

// madeNoun names what cmd makes.
func madeNoun(cmd Command) string {
	if cmd == CommandStartPublication {
		return "publication"
	}
	return "subscription"
}
