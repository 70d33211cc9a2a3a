package capabilities_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/natsserver"
)

// startExampleMediaServer starts an embedded NATS server on a free loopback port and a media server
// simulator on it with one source, front-door (streams video and audio). It returns the NATS URL and
// a function that stops both. In a worker, the NATS server and the media server are already there.
func startExampleMediaServer() (url string, stop func()) {
	ns, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	media := sim.New(nc, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: 20 * time.Millisecond})
	if err := media.Start(context.Background()); err != nil {
		panic(err)
	}
	return ns.ClientURL(), func() {
		media.Stop()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// A worker keeps the media server's capabilities with a Tracker and resolves the stable source_id an
// intent names to the source's current session.
func ExampleTracker() {
	url, stop := startExampleMediaServer()
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	tracker := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tracker.Start(ctx); err != nil { // returns once the first snapshot is in
		panic(err)
	}
	defer tracker.Stop()

	session, online, ok := tracker.Resolve("front-door")
	fmt.Println("front-door known:", ok, "online:", online, "session set:", session != "")
	src, _ := tracker.Current().Source("front-door")
	for _, st := range src.Streams {
		orig, _ := st.Original()
		fmt.Println(st.StreamID, st.MediaKind, orig.VariantID, orig.Codec, orig.State)
	}
	_, _, ok = tracker.Resolve("back-yard")
	fmt.Println("back-yard known:", ok)
	// Output:
	// front-door known: true online: true session set: true
	// video video source h264 READY
	// audio audio source opus READY
	// back-yard known: false
}

// A worker publishes a variant with StartPublicationOrUndo (what the media server makes of a start
// given up on is stopped, not left behind) and reports it only once the capabilities show it READY.
func ExampleCommands_StartPublicationOrUndo() {
	url, stop := startExampleMediaServer()
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tracker := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
	if err := tracker.Start(ctx); err != nil {
		panic(err)
	}
	defer tracker.Stop()
	cmds, err := capabilities.NewCommands(nc, "transcoder")
	if err != nil {
		panic(err)
	}
	logUndo := func(err error) { fmt.Println("left behind:", err) }

	session, online, _ := tracker.Resolve("front-door")
	if !online {
		return // wait for a snapshot showing it online
	}
	rep, err := cmds.StartPublicationOrUndo(ctx, capabilities.StartPublicationRequest{
		SessionID: session, StreamID: "video", VariantID: "browser-h264-720p",
		OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled,
	}, logUndo)
	if err != nil {
		panic(err)
	}
	v, err := tracker.WaitReady(ctx, "front-door", "video", rep.VariantID)
	if errors.Is(err, capabilities.ErrVariantFailed) {
		fmt.Println("the media server could not produce it")
		return
	} else if err != nil {
		panic(err)
	}
	fmt.Println(v.VariantID, v.State, v.Codec, v.Width, v.Height, "published by", v.Publisher)

	// A second principal asking for the same variant is refused; errors.Is compares by code.
	other, _ := capabilities.NewCommands(nc, "recorder")
	_, err = other.StartPublicationOrUndo(ctx, capabilities.StartPublicationRequest{
		SessionID: session, StreamID: "video", VariantID: "browser-h264-720p",
		OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled,
	}, logUndo)
	fmt.Println("conflict:", errors.Is(err, capabilities.ErrPublicationConflict))

	// A zero-value request never reaches the media server.
	_, err = cmds.StartPublication(ctx, capabilities.StartPublicationRequest{})
	fmt.Println("no recording mode:", capabilities.CodeOf(err))

	if err := cmds.StopPublication(ctx, rep.PublicationID); err != nil {
		panic(err)
	}
	// Output:
	// browser-h264-720p READY h264 1280 720 published by transcoder
	// conflict: true
	// no recording mode: PUBLICATION_ERROR_CODE_RECORDING_MODE_INVALID
}

// A viewer subscribes with SubscribeOrUndo and tells the media server's refusals apart by code: a
// stale session is ErrSourceUnavailable (resolve the source again), a variant that is not READY is
// ErrVariantNotReady (wait for it).
func ExampleCommands_SubscribeOrUndo() {
	url, stop := startExampleMediaServer()
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tracker := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
	if err := tracker.Start(ctx); err != nil {
		panic(err)
	}
	defer tracker.Stop()
	cmds, err := capabilities.NewCommands(nc, "viewer")
	if err != nil {
		panic(err)
	}
	logUndo := func(err error) { fmt.Println("left behind:", err) }
	session, _, _ := tracker.Resolve("front-door")

	_, err = cmds.SubscribeOrUndo(ctx, capabilities.SubscribeRequest{SessionID: session, StreamID: "video", VariantID: "browser-vp9-1080p"}, logUndo)
	fmt.Println("not ready:", errors.Is(err, capabilities.ErrVariantNotReady))
	_, err = cmds.SubscribeOrUndo(ctx, capabilities.SubscribeRequest{SessionID: "sess-gone", StreamID: "video"}, logUndo)
	fmt.Println("stale session:", errors.Is(err, capabilities.ErrSourceUnavailable))

	// Without a variant_id: the stream's original variant.
	rep, err := cmds.SubscribeOrUndo(ctx, capabilities.SubscribeRequest{SessionID: session, StreamID: "video"}, logUndo)
	if err != nil {
		panic(err)
	}
	fmt.Println("subscribed to", rep.VariantID)
	if err := cmds.Unsubscribe(ctx, rep.SubscriptionID); err != nil {
		panic(err)
	}
	err = cmds.Unsubscribe(ctx, rep.SubscriptionID)
	fmt.Println("again:", errors.Is(err, capabilities.ErrSubscriptionNotFound))
	// Output:
	// not ready: true
	// stale session: true
	// subscribed to source
	// again: true
}
