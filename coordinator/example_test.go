package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/internal/exampleenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// A coordinator asks service/transcoder-a to publish the front door as browser H.264 720p, and later
// withdraws the wish without losing anyone else's change to the intent.
func ExampleCoordinator() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	c, closeConn := exampleenv.Client(url, "coordinator") // an admin principal
	defer closeConn()
	co, err := coordinator.New(c)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	in := coordinator.PublishIntent("front-door", coordinator.MediaKindVideo, coordinator.RecordingDisabled)
	in.VariantID, in.OutputProfile = "browser-h264-720p", "browser-h264-720p"
	e, err := co.PutIntent(ctx, "service/transcoder-a", "intents/front-door", in)
	if err != nil {
		panic(err)
	}
	fmt.Println("intent at revision", e.Revision)
	again, err := co.PutIntent(ctx, "service/transcoder-a", "intents/front-door", in)
	fmt.Println("the same intent again writes nothing:", err == nil && again.Revision == e.Revision)

	// A bad intent is refused locally: nothing is sent.
	_, err = co.PutIntent(ctx, "service/transcoder-a", "intents/back-yard",
		coordinator.PublishIntent("back-yard", coordinator.MediaKindVideo, "sometimes"))
	fmt.Println("invalid recording mode refused:", errors.Is(err, wire.ErrSchemaInvalid))

	// The workers report what they observed under status/intents/front-door, never over the intent.
	e, err = co.SetDesired(ctx, "service/transcoder-a", "intents/front-door", false)
	if err != nil {
		panic(err)
	}
	fmt.Println("withdrawn at revision", e.Revision)
	_, err = co.SetDesired(ctx, "service/transcoder-a", "intents/nothing-here", false)
	fmt.Println("no intent:", errors.Is(err, wire.ErrNotFound))
	// Output:
	// intent at revision 1
	// the same intent again writes nothing: true
	// invalid recording mode refused: true
	// withdrawn at revision 2
	// no intent: true
}

// A coordinator watches the fleet to see who is there to do the work: a worker appears with its
// first heartbeat, and its leases with the heartbeats that list them.
func ExampleCoordinator_WatchFleet() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	c, closeConn := exampleenv.Client(url, "coordinator") // the fleet view takes an admin principal
	defer closeConn()
	co, err := coordinator.New(c)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fleet, err := co.WatchFleet(ctx)
	if err != nil {
		panic(err)
	}
	defer fleet.Close()
	fmt.Println("workers at first:", len(fleet.Workers()))

	// A worker process of transcoder-a (elsewhere, in its own process).
	wnc, err := client.Connect(url, "transcoder-a")
	if err != nil {
		panic(err)
	}
	defer wnc.Close()
	w, err := worker.New(worker.Options{Conn: wnc, Principal: "transcoder-a", WorkerID: "tx-1",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	w.HoldLease("leases/front-door-video-browser-h264-720p")
	wctx, stopWorker := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()

	// Read the view after each change until the worker is ready.
	for {
		tx1, ok := fleet.Worker("transcoder-a", "tx-1")
		if ok && tx1.Status == wire.StatusReady {
			break
		}
		select {
		case <-fleet.Changes():
		case <-ctx.Done():
			panic(ctx.Err())
		}
	}
	for _, w := range fleet.Workers() {
		fmt.Println(w.Principal, w.WorkerID, w.Service, w.Status, w.Leases)
	}
	holder, ok := fleet.Holder("leases/front-door-video-browser-h264-720p")
	fmt.Println("lease listed by:", holder.WorkerID, ok)
	fmt.Println("following:", fleet.Following())

	stopWorker()
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// workers at first: 0
	// transcoder-a tx-1 transcoder-a ready [leases/front-door-video-browser-h264-720p]
	// lease listed by: tx-1 true
	// following: true
	// worker stopped: <nil>
}
