package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keeppeek/coordination/internal/exampleenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// shipFrom ships one batch of records starting at offset and returns the offset after it.
func shipFrom(_ context.Context, offset string) (string, error) {
	n, _ := strconv.ParseUint(offset, 10, 64)
	return strconv.FormatUint(n+100, 10), nil
}

// A worker owns one piece of work while it holds its lease, and writes its status on the lease's
// behalf: once the lease is released (or lost), the same write is fenced off.
func ExampleClaim() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	c, closeConn := exampleenv.Client(url, "transcoder-a") // lease namespaces take an admin principal
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	o := lease.Options{Namespace: "service/transcoder-a", Key: "leases/front-door-video-browser-h264-720p",
		Holder: "transcoder-a-1"}
	l, err := lease.Claim(ctx, c, o)
	if err != nil {
		panic(err)
	}
	fmt.Println("held:", l.Held())

	// A second claimant finds it held, and by whom.
	o2 := o
	o2.Holder = "transcoder-a-2"
	_, err = lease.Claim(ctx, c, o2)
	var held *lease.HeldError
	fmt.Println("second claim held:", errors.Is(err, lease.ErrHeld), errors.As(err, &held) && held.Holder == "transcoder-a-1")

	status := wire.PutRequest{Key: "status/front-door", Schema: wire.SchemaObservedStatus,
		Document: []byte(`{"subject_key":"intents/front-door","state":"active","observed_at_ms":1764451200000}`)}
	_, err = l.Put(ctx, status) // guarded by the lease's revision
	fmt.Println("status written:", err == nil)

	if err := l.Release(ctx); err != nil { // deletes the entry: a standby claims at once
		panic(err)
	}
	_, err = l.Put(ctx, status)
	fmt.Println("after release:", errors.Is(err, wire.ErrGuardFailed), errors.Is(l.Err(), lease.ErrReleased))
	// Output:
	// held: true
	// second claim held: true true
	// status written: true
	// after release: true true
}

// A standby waits with Campaign while another worker holds the lease, and holds it as soon as the
// holder releases it (or its entry expires), without polling.
func ExampleCampaign() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	c, closeConn := exampleenv.Client(url, "transcoder-a")
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	o := lease.Options{Namespace: "service/transcoder-a", Key: "leases/front-door", Holder: "transcoder-a-1"}
	first, err := lease.Claim(ctx, c, o)
	if err != nil {
		panic(err)
	}
	o.Holder = "transcoder-a-2"
	standby := make(chan *lease.Lease)
	go func() {
		l, err := lease.Campaign(ctx, c, o) // returns once this standby holds the lease
		if err != nil {
			panic(err)
		}
		standby <- l
	}()
	if err := first.Release(ctx); err != nil {
		panic(err)
	}
	second := <-standby
	fmt.Println(second.Holder(), "holds it:", second.Held())
	if err := second.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// transcoder-a-2 holds it: true
}

// A singleton job: one replica ships the audit log at a time, and a new leader resumes where the
// previous one stopped. Here the first leader stops (a SIGTERM, say: a worker ends Run's context on
// it), releases its lease, and the standby takes over at once instead of after the TTL.
func ExampleElector() {
	url, stopService := exampleenv.StartStateService()
	defer stopService()
	c, closeConn := exampleenv.Client(url, "coordinator")
	defer closeConn()

	// replica runs one replica's Elector until its context ends; led is told of each term.
	replica := func(ctx context.Context, holder string, led chan<- string) <-chan error {
		e, err := lease.NewElector(c, lease.ElectorOptions{
			Options: lease.Options{Namespace: "service/shipper", Key: "leaders/worm-audit", Holder: holder,
				OffsetKey: "offsets/worm-audit"},
			OnStarted: func(ctx context.Context, l *lease.Lease) {
				offset, err := l.LoadOffset(ctx)
				if err != nil {
					return
				}
				next, err := shipFrom(ctx, offset)
				if err != nil {
					return
				}
				if err := l.SaveOffset(ctx, next); errors.Is(err, wire.ErrGuardFailed) {
					return // deposed: the next leader carries on from the last saved offset
				}
				led <- fmt.Sprintf("%s resumed from %q and saved %q", holder, offset, next)
				<-ctx.Done() // ... lead until the lease is lost or Run's ctx ends
			},
		})
		if err != nil {
			panic(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		return done
	}

	led := make(chan string)
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := replica(ctx1, "shipper-1", led)
	fmt.Println(<-led)
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := replica(ctx2, "shipper-2", led) // a standby while shipper-1 leads

	stop1() // shipper-1 stops: its term ends, and Run returns once the lease is released
	fmt.Println("shipper-1 stopped:", <-done1)
	fmt.Println(<-led)
	stop2()
	fmt.Println("shipper-2 stopped:", <-done2)
	// Output:
	// shipper-1 resumed from "" and saved "100"
	// shipper-1 stopped: <nil>
	// shipper-2 resumed from "100" and saved "200"
	// shipper-2 stopped: <nil>
}
