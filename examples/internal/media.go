package internal

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
)

// NewTracker returns a worker's capabilities tracker over nc with opts, its Logger defaulting to
// the worker's log.
func NewTracker(nc *nats.Conn, opts capabilities.TrackerOptions, log *slog.Logger) *capabilities.Tracker {
	if opts.Logger == nil {
		opts.Logger = log
	}
	return capabilities.NewTracker(nc, opts)
}

// UndoFailed returns the onUndoErr of SubscribeOrUndo and StartPublicationOrUndo for a worker: it
// logs, as an error, a media command whose result may be left on the media server with nobody to end
// it: one answered after it was given up on whose result could not be undone, or one never answered.
func UndoFailed(log *slog.Logger) func(error) {
	return func(err error) {
		log.Error("a media command's result may be left behind on the media server", "err", err)
	}
}
