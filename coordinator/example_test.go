package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// A coordinator asks service/transcoder-a to publish the front door as browser H.264 720p, sees who
// is there to do it, and later withdraws the wish without losing anyone else's change to the intent.
func ExampleCoordinator() {
	nc, err := client.Connect(nats.DefaultURL, "coordinator") // an admin principal
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "coordinator")
	if err != nil {
		log.Fatal(err)
	}
	co, err := coordinator.New(c)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	in := coordinator.PublishIntent("front-door", coordinator.MediaKindVideo, coordinator.RecordingDisabled)
	in.VariantID, in.OutputProfile = "browser-h264-720p", "browser-h264-720p"
	e, err := co.PutIntent(ctx, "service/transcoder-a", "intents/front-door", in)
	if errors.Is(err, wire.ErrSchemaInvalid) {
		log.Fatal(err) // refused locally: nothing was sent
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("intent at revision", e.Revision)

	fleet, err := co.WatchFleet(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.Close()
	for _, w := range fleet.Workers() {
		fmt.Println(w.Principal, w.WorkerID, w.Status, w.Leases)
	}
	// The workers report what they observed under status/intents/front-door, never over the intent.

	if _, err := co.SetDesired(ctx, "service/transcoder-a", "intents/front-door", false); err != nil {
		log.Fatal(err)
	}
}
