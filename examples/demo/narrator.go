package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/keeppeek/coordination/examples/internal/transcode"
)

// narrator tells the tour. A worker's event is told from the worker's own callback, at once, and the
// tour's own lines when they happen, all under one lock: the lines come in the order the events were
// reported and their timestamps never go backwards. (Events queued for a reader and told later would
// be told out of order: one reported just before the kill, told just after the KILLED line.)
type narrator struct {
	mu       sync.Mutex
	out      io.Writer
	start    time.Time
	hushed   bool              // the tour is over: the workers' events are no longer told
	lastKind map[string]string // worker id -> the kind of its last told event
	detected bool              // the CV worker's first detection was reported
	// subs counts the subscriptions the viewer and the CV worker told; startedAt holds, per
	// transcoder, subs as they were when it told its last "publication started". Subscriptions told
	// after that line are to its publication: starting it ended those of the publication before.
	subs      subCounts
	startedAt map[string]subCounts
	// wake is offered a token after every subscription told: the tour looks at subs again.
	wake chan struct{}

	// ready receives the worker id of each transcoder that reported its publication READY. It is never
	// waited on by a worker: a full channel drops (the tour reads it as long as it waits for it).
	ready chan string

	// lost, when set, is called once, under mu, with the first error writing to out: its reader is
	// gone (a pipe closed, a terminal hung up), and nobody will see the rest of the tour.
	lost    func(error)
	outLost bool
}

func newNarrator(out io.Writer) *narrator {
	return &narrator{out: out, start: time.Now(), lastKind: map[string]string{}, startedAt: map[string]subCounts{},
		ready: make(chan string, 16), wake: make(chan struct{}, 1)}
}

// subCounts are numbers of subscriptions told, the viewer's and the CV worker's.
type subCounts struct{ viewer, cv int }

// say tells one line of the tour, stamped with the time since the start.
func (n *narrator) say(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sayLocked(format, args...)
}

func (n *narrator) sayLocked(format string, args ...any) {
	_, err := fmt.Fprintf(n.out, "[%6.2fs] %s\n", time.Since(n.start).Seconds(), fmt.Sprintf(format, args...))
	if err != nil && !n.outLost {
		n.outLost = true
		if n.lost != nil {
			n.lost(err)
		}
	}
}

// while runs fn with the narration held: no worker's event is told between what fn does and the line
// it says about it. fn must not wait for a worker (the workers' callbacks wait for it).
func (n *narrator) while(fn func(say func(string, ...any)) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fn(n.sayLocked)
}

// hush ends the telling of the workers' events: after the tour nobody needs them, and nobody may be
// reading the output any more.
func (n *narrator) hush() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hushed = true
}

// worker tells a worker's event, unless the tour is over or it would repeat that worker's last told
// kind (a standby reports itself at every reconcile). It reports whether it told it.
func (n *narrator) worker(id, kind, format string, args ...any) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.workerLocked(id, kind, format, args...)
}

func (n *narrator) workerLocked(id, kind, format string, args ...any) bool {
	if n.hushed || (kind == "standby" && n.lastKind[id] == kind) {
		return false
	}
	n.lastKind[id] = kind
	n.sayLocked("%s: %s", id, fmt.Sprintf(format, args...))
	return true
}

// transcoder is a transcoder's Events callback.
func (n *narrator) transcoder(e transcode.Event) {
	switch e.Kind {
	case "lease claimed", "standby", "publication started", "capability ready", "invalid":
		n.mu.Lock()
		if n.workerLocked(e.WorkerID, e.Kind, "%s (%s)", e.Kind, e.Detail) && e.Kind == "publication started" {
			n.startedAt[e.WorkerID] = n.subs
		}
		n.mu.Unlock()
	}
	if e.Kind == "capability ready" {
		offer(n.ready, e.WorkerID)
	}
}

// viewer is the viewer's Events callback.
func (n *narrator) viewer(kind, intent, detail string) {
	n.mu.Lock()
	told := n.workerLocked("viewer-1", kind, "%s: %s", kind, detail)
	if told && kind == "viewer subscribed" {
		n.subs.viewer++
	}
	n.mu.Unlock()
	if kind == "viewer subscribed" {
		offer(n.wake, struct{}{})
	}
}

// cv is the CV worker's Events callback: its subscriptions and its first detection.
func (n *narrator) cv(kind, intent, detail string) {
	switch kind {
	case "cv subscribed", "cv unsubscribed", "cv lease lost":
		n.mu.Lock()
		var told bool
		if detail == "" {
			told = n.workerLocked("cv-1", kind, "%s", kind)
		} else {
			told = n.workerLocked("cv-1", kind, "%s (%s)", kind, detail)
		}
		if told && kind == "cv subscribed" {
			n.subs.cv++
		}
		n.mu.Unlock()
		if kind == "cv subscribed" {
			offer(n.wake, struct{}{})
		}
	case "detection":
		n.mu.Lock()
		first := !n.detected
		n.detected = true
		n.mu.Unlock()
		if first {
			n.worker("cv-1", kind, "first detection emitted to its log: %s", detail)
		}
	}
}

// waitReady waits until a transcoder other than skip reports its publication READY (and, with
// viewer, until the viewer has subscribed); it returns that transcoder's worker id.
func (n *narrator) waitReady(ctx context.Context, skip string, viewer bool) (string, error) {
	ready := ""
	for {
		n.mu.Lock()
		subscribed := !viewer || n.subs.viewer > 0
		n.mu.Unlock()
		if ready != "" && subscribed {
			return ready, nil
		}
		select {
		case <-ctx.Done():
			return "", errors.New("the tour did not complete in time")
		case id := <-n.ready:
			if id != skip {
				ready = id
			}
		case <-n.wake:
		}
	}
}

// waitSubscribedAgain waits until the viewer and the CV worker have both told a subscription after
// transcoder id told its last "publication started": they subscribed to its publication.
func (n *narrator) waitSubscribedAgain(ctx context.Context, id string) error {
	for {
		n.mu.Lock()
		base, started := n.startedAt[id]
		done := started && n.subs.viewer > base.viewer && n.subs.cv > base.cv
		n.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("the tour did not complete in time: the viewer and the CV worker did not subscribe again")
		case <-n.wake:
		}
	}
}

// offer hands a signal to the tour without ever blocking the worker that reports it.
func offer[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}
