package lease_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// shipFrom ships one batch of records starting at offset and returns the offset after it.
func shipFrom(_ context.Context, offset string) (string, error) {
	n, _ := strconv.ParseUint(offset, 10, 64)
	return strconv.FormatUint(n+100, 10), nil
}

// A singleton job: one replica ships the audit log at a time, and a new leader resumes where the
// previous one stopped.
func ExampleElector() {
	nc, err := client.Connect("nats://127.0.0.1:4222", "coordinator")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "coordinator")
	if err != nil {
		log.Fatal(err)
	}
	e, err := lease.NewElector(c, lease.ElectorOptions{
		Options: lease.Options{Namespace: "service/shipper", Key: "leaders/worm-audit", Holder: "shipper-1",
			OffsetKey: "offsets/worm-audit"},
		OnStarted: func(ctx context.Context, l *lease.Lease) {
			offset, err := l.LoadOffset(ctx)
			if err != nil {
				return
			}
			for l.Held() && ctx.Err() == nil { // before each unit of work
				next, err := shipFrom(ctx, offset)
				if err != nil {
					return
				}
				if err := l.SaveOffset(ctx, next); errors.Is(err, wire.ErrGuardFailed) {
					return // deposed: the next leader carries on from the last saved offset
				}
				offset = next
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// A supervisor (systemd, Kubernetes) stops a process with SIGTERM: the leader then releases its
	// lease, and the standby takes over at once instead of after the TTL.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := e.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A worker owns one piece of work while it holds its lease, and writes its status on the lease's
// behalf.
func ExampleClaim() {
	var c *client.Client // an admin principal's client
	ctx := context.Background()
	l, err := lease.Claim(ctx, c, lease.Options{Namespace: "service/transcoder-a",
		Key: "leases/front-door-video-browser-h264-720p", Holder: "transcoder-a-1"})
	if errors.Is(err, lease.ErrHeld) {
		return // another worker has it; lease.Campaign would wait for it instead
	}
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	_, err = l.Put(ctx, wire.PutRequest{Key: "status/front-door", Schema: "keeppeek.observed-status.v1",
		Document: []byte(`{"subject_key":"intents/front-door","state":"active","observed_at_ms":1764451200000}`)})
	if errors.Is(err, wire.ErrGuardFailed) {
		return // the lease is lost: the write did not happen
	}
	<-l.Lost()
}
