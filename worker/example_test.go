package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/exampleenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// newExampleWorker returns a worker of transcoder-a on nc, as the package doc shows it: a
// controller started with the worker and stopped in reverse, and an elector on a goroutine the
// worker owns, whose leader lists its lease in the heartbeats.
func newExampleWorker(nc *nats.Conn, logger *slog.Logger) *worker.Worker {
	w, err := worker.New(worker.Options{Conn: nc, Principal: "transcoder-a", WorkerID: "tx-1", Service: "transcoder-a",
		Logger: logger})
	if err != nil {
		panic(err)
	}
	controller, err := reconciler.New(w.Client(), reconciler.Func(func(context.Context, reconciler.Request) (reconciler.Result, error) {
		return reconciler.Result{}, nil // ... make the world match the intent
	}), reconciler.Options{Namespace: "service/transcoder-a", KeyPrefix: "intents/"})
	if err != nil {
		panic(err)
	}
	elector, err := lease.NewElector(w.Client(), lease.ElectorOptions{
		Options: lease.Options{Namespace: "service/transcoder-a", Key: "leaders/janitor", Holder: w.ID()},
		OnStarted: func(ctx context.Context, l *lease.Lease) {
			w.HoldLease(l.Key()) // the heartbeats list it
			defer w.DropLease(l.Key())
			<-ctx.Done() // ... the singleton job
		},
	})
	if err != nil {
		panic(err)
	}
	w.Add(controller)            // started in order, stopped in reverse
	w.Go("elector", elector.Run) // a goroutine the worker owns
	return w
}

// A worker process runs until the process is interrupted or terminated (SIGTERM, which is how a
// supervisor such as systemd or Kubernetes stops it), then stops gracefully: it announces
// "draining", stops its goroutines and components (the elector releases its lease), and announces
// "stopping".
func ExampleWorker() {
	nc, err := client.Connect(nats.DefaultURL, "transcoder-a")
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	w := newExampleWorker(nc, slog.Default())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil { // until ctx ends
		panic(err)
	}
}

// What the fleet hears of a worker's life: its heartbeats, each status as it first goes out.
func ExampleWorker_Run() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	// Someone listening to the heartbeats (the state server does, and keeps the fleet view).
	listener, err := nats.Connect(url)
	if err != nil {
		panic(err)
	}
	defer listener.Close()
	beats, err := listener.SubscribeSync(wire.HeartbeatSubject(wire.DefaultPrefix, "transcoder-a", "tx-1"))
	if err != nil {
		panic(err)
	}
	if err := listener.Flush(); err != nil {
		panic(err)
	}
	next := func() wire.Heartbeat {
		msg, err := beats.NextMsg(10 * time.Second)
		if err != nil {
			panic(err)
		}
		var hb wire.Heartbeat
		if err := json.Unmarshal(msg.Data, &hb); err != nil {
			panic(err)
		}
		return hb
	}

	nc, err := client.Connect(url, "transcoder-a")
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	w := newExampleWorker(nc, slog.New(slog.DiscardHandler))
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	hb := next()
	fmt.Println(hb.Status, hb.Leases)
	for hb.Status != wire.StatusReady || len(hb.Leases) == 0 { // ready, and the elector leads
		hb = next()
	}
	fmt.Println(hb.Status, hb.Leases, "ready check:", w.Ready())

	stop() // as SIGTERM would
	for hb.Status != wire.StatusDraining {
		hb = next()
	}
	fmt.Println(hb.Status, hb.Leases)
	for hb.Status != wire.StatusStopping {
		hb = next()
	}
	fmt.Println(hb.Status, hb.Leases)
	fmt.Println("Run returned:", <-stopped)
	// Output:
	// starting []
	// ready [leaders/janitor] ready check: <nil>
	// draining [leaders/janitor]
	// stopping []
	// Run returned: <nil>
}
