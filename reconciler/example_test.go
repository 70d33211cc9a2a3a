package reconciler_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// A worker's controller: it reconciles the media intents of service/transcoder-a, again whenever the
// media server's capabilities change, and reports an intent that fails validation as invalid instead
// of acting on it.
func ExampleController() {
	nc, err := client.Connect(nats.DefaultURL, "transcoder-a")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "transcoder-a")
	if err != nil {
		log.Fatal(err)
	}
	tracker := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
	capsChanged, unsubscribe := tracker.Subscribe()
	defer unsubscribe()
	ctx := context.Background()
	if err := tracker.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer tracker.Stop()

	const ns = "service/transcoder-a"
	var ctrl *reconciler.Controller
	reconcile := func(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
		e, ok := ctrl.Cache().Get(req.Key)
		if !ok {
			return reconciler.Result{}, nil // the intent is gone: stop what was started for it
		}
		mi, err := reconciler.DecodeMediaIntent(e)
		if err == nil {
			err = mi.Validate()
		}
		if ve := (*reconciler.ValidationError)(nil); errors.As(err, &ve) {
			st := reconciler.InvalidStatus(req.Key, err, time.Now())
			_, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "status/" + req.Key,
				Schema: reconciler.ObservedStatusSchema, Document: st.Document()})
			return reconciler.Result{}, err // no command for an invalid intent
		}
		if _, _, ok := tracker.Resolve(mi.SourceID); !ok {
			return reconciler.Result{}, nil // the capabilities trigger brings the key back
		}
		// ... claim the lease, StartPublication with mi.RecordingMode, write an active status.
		return reconciler.Result{}, nil
	}
	ctrl, err = reconciler.New(c, reconciler.Func(reconcile), reconciler.Options{
		Namespace: ns, KeyPrefix: "intents/", MaxConcurrent: 4,
		Triggers: []<-chan struct{}{capsChanged},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := ctrl.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer ctrl.Stop()
	// ... run until told to stop.
}
