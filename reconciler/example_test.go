package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/internal/exampleenv"
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
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "transcoder-a")
	if err != nil {
		panic(err)
	}
	tracker := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
	capsChanged, unsubscribe := tracker.Subscribe()
	defer unsubscribe()
	ctx := context.Background()
	if err := tracker.Start(ctx); err != nil {
		panic(err)
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
	// Prometheus metrics, served with the process's others (promhttp.Handler()).
	metrics, err := reconciler.NewMetrics(prometheus.DefaultRegisterer)
	if err != nil {
		panic(err)
	}
	ctrl, err = reconciler.New(c, reconciler.Func(reconcile), reconciler.Options{
		Namespace: ns, KeyPrefix: "intents/", MaxConcurrent: 4,
		Triggers: []<-chan struct{}{capsChanged},
		Metrics:  metrics, Name: "transcoder-intents",
	})
	if err != nil {
		panic(err)
	}
	if err := ctrl.Start(ctx); err != nil {
		panic(err)
	}
	defer ctrl.Stop()
	// ... run until told to stop.
}

// The life of one intent as a controller sees it: each change is reconciled from the cache, which
// already holds it, and an intent the worker cannot act on is reported as invalid.
func ExampleNew() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	c, closeConn := exampleenv.Client(url, "transcoder-a")
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const ns = "service/transcoder-a"
	seen := make(chan string)
	var ctrl *reconciler.Controller
	ctrl, err := reconciler.New(c, reconciler.Func(func(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
		e, ok := ctrl.Cache().Get(req.Key)
		if !ok {
			seen <- req.Key + ": gone"
			return reconciler.Result{}, nil
		}
		mi, err := reconciler.DecodeMediaIntent(e)
		if err == nil {
			err = mi.Validate()
		}
		if ve := (*reconciler.ValidationError)(nil); errors.As(err, &ve) {
			st := reconciler.InvalidStatus(req.Key, err, time.Now())
			if _, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "status/" + req.Key,
				Schema: reconciler.ObservedStatusSchema, Document: st.Document()}); err != nil {
				return reconciler.Result{}, err // retried with backoff
			}
			seen <- req.Key + ": invalid (" + ve.Field + ")"
			return reconciler.Result{}, nil
		}
		seen <- fmt.Sprintf("%s: %s %s desired=%v", req.Key, mi.Role, mi.SourceID, mi.Desired)
		return reconciler.Result{}, nil
	}), reconciler.Options{Namespace: ns, KeyPrefix: "intents/"})
	if err != nil {
		panic(err)
	}
	if err := ctrl.Start(ctx); err != nil { // returns once the first snapshot is in
		panic(err)
	}
	defer ctrl.Stop()

	// What coordinators write.
	put := func(key, schema, doc string) {
		if _, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: key, Schema: schema, Document: []byte(doc)}); err != nil {
			panic(err)
		}
	}
	put("intents/front-door", reconciler.MediaIntentSchema,
		`{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video","recording_mode":"disabled"}`)
	fmt.Println(<-seen)
	put("intents/front-door", reconciler.MediaIntentSchema,
		`{"role":"publish","desired":false,"source_id":"front-door","media_kind":"video","recording_mode":"disabled"}`)
	fmt.Println(<-seen)
	// Something under the prefix that is no media intent at all (the store checks a document against
	// its own schema only).
	put("intents/back-yard", reconciler.ObservedStatusSchema,
		`{"subject_key":"intents/back-yard","state":"active","observed_at_ms":1764451200000}`)
	fmt.Println(<-seen)
	if _, err := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "intents/front-door"}); err != nil {
		panic(err)
	}
	fmt.Println(<-seen)
	// Output:
	// intents/front-door: publish front-door desired=true
	// intents/front-door: publish front-door desired=false
	// intents/back-yard: invalid (schema)
	// intents/front-door: gone
}
