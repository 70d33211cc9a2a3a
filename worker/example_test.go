package worker_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/worker"
)

// A worker process, as the package doc shows it: a controller started with the worker and stopped
// in reverse, an elector on a goroutine the worker owns, heartbeats and a graceful stop until the
// process is interrupted or terminated (SIGTERM).
func ExampleWorker() {
	nc, err := client.Connect(nats.DefaultURL, "transcoder-a")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.New(worker.Options{Conn: nc, Principal: "transcoder-a", WorkerID: "tx-1", Service: "transcoder-a"})
	if err != nil {
		log.Fatal(err)
	}
	controller, err := reconciler.New(w.Client(), reconciler.Func(func(context.Context, reconciler.Request) (reconciler.Result, error) {
		return reconciler.Result{}, nil // ... make the world match the intent
	}), reconciler.Options{Namespace: "service/transcoder-a", KeyPrefix: "intents/"})
	if err != nil {
		log.Fatal(err)
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
		log.Fatal(err)
	}
	w.Add(controller)            // started in order, stopped in reverse
	w.Go("elector", elector.Run) // a goroutine the worker owns
	// A supervisor (systemd, Kubernetes) stops a process with SIGTERM: the worker then stops gracefully.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}
