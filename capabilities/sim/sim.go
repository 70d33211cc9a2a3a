package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
)

// DefaultReadyDelay is how long a started publication stays PENDING by default.
const DefaultReadyDelay = 300 * time.Millisecond

// OriginalVariantID is the variant id of every stream's own variant.
const OriginalVariantID = "source"

// Options configure a Sim. Every field is optional.
type Options struct {
	// Prefix is the subject prefix. Default capabilities.DefaultPrefix ("kp").
	Prefix string
	// ReadyDelay is how long a started publication's variant stays PENDING before it turns READY (or
	// FAILED). Default DefaultReadyDelay (300 ms).
	ReadyDelay time.Duration
	// Sources are the sources the simulator starts with, in order.
	Sources []SourceConfig
	// Failing are variants whose publications turn FAILED instead of READY (see SetFailing).
	Failing []VariantRef
	// Logger logs every command and its outcome at Info, and publishing failures. Default: discard.
	Logger *slog.Logger
	// After is the generation the simulator counts on from: Start announces After+1 (or later, by one
	// per change made before Start: AddSource, SetOnline). Generations only
	// grow (SPEC section 12), across restarts too: a simulator that replaces another must start after
	// the generations it announced (cmd/mediasim uses the clock); a tracker that finds generations
	// going back holds its snapshot stale until they pass it (see capabilities.Tracker). Two
	// simulators serving one prefix at once both receive every request and both answer it (a fetch
	// takes the first answer; a command is carried out by each that can). Default 0.
	After uint64
	// KeepCommands bounds the record Commands returns to the newest KeepCommands commands. Default 0:
	// every command, for tests that assert what was (never) sent. A simulator that runs for long (cmd/
	// mediasim, a demo left running) sets a bound, or its memory grows with every command it serves.
	KeepCommands int
}

// SourceConfig describes a simulated source.
type SourceConfig struct {
	// SourceID is the stable id; it must follow the identifier rule (capabilities.ValidIdentifier).
	SourceID string
	// Offline starts the source disconnected.
	Offline bool
	// Streams are the source's streams and their original variants. Default DefaultStreams().
	Streams []StreamConfig
	// RecordingModes are the modes its publications may ask for. Default: inherit, disabled, required.
	RecordingModes []string
}

// StreamConfig describes a stream and its original variant (variant_id OriginalVariantID, READY
// while the source is online, no publisher).
type StreamConfig struct {
	StreamID  string
	MediaKind string
	Codec     string
	Width     int
	Height    int
}

// DefaultStreams are the streams of a source configured without any: "video" (h264 1920x1080) and
// "audio" (opus).
func DefaultStreams() []StreamConfig {
	return []StreamConfig{
		{StreamID: "video", MediaKind: capabilities.MediaKindVideo, Codec: "h264", Width: 1920, Height: 1080},
		{StreamID: "audio", MediaKind: capabilities.MediaKindAudio, Codec: "opus"},
	}
}

// Sources returns a default SourceConfig for each id.
func Sources(ids ...string) []SourceConfig {
	out := make([]SourceConfig, len(ids))
	for i, id := range ids {
		out[i] = SourceConfig{SourceID: id}
	}
	return out
}

// VariantRef names a variant of a stream of a source.
type VariantRef struct {
	SourceID, StreamID, VariantID string
}

// PublicationInfo is a live publication.
type PublicationInfo struct {
	ID            string
	Principal     string
	SourceID      string
	SessionID     string
	StreamID      string
	VariantID     string
	OutputProfile string
	RecordingMode string
}

// SubscriptionInfo is a live subscription.
type SubscriptionInfo struct {
	ID        string
	Principal string
	SourceID  string
	SessionID string
	StreamID  string
	VariantID string
}

// CommandRecord is one command the simulator received.
type CommandRecord struct {
	// Principal is the subject's principal token.
	Principal string
	Command   capabilities.Command
	// Body is the request body as received.
	Body json.RawMessage
	// Reply is the reply sent.
	Reply capabilities.Reply
}

// Sim is a running media server simulator. Its methods are safe for concurrent use.
type Sim struct {
	nc         *nats.Conn
	prefix     string
	readyDelay time.Duration
	log        *slog.Logger
	optErr     error

	mu         sync.Mutex
	generation uint64
	sources    []*source // in configuration order
	pubs       map[string]*publication
	subs       map[string]*SubscriptionInfo
	failing    map[VariantRef]bool
	commands   []CommandRecord
	keepCmds   int  // Options.KeepCommands
	quiet      bool // SuppressChanged
	started    bool
	stopped    bool
	natsSubs   []*nats.Subscription
	timers     sync.WaitGroup // ready timers scheduled and not stopped
	cmdDelay   time.Duration  // SetCommandDelay
	pending    int            // commands received and not yet answered: queued or being served
	handling   sync.WaitGroup // caps.v1.get requests being answered; Stop waits for them
	serving    sync.WaitGroup // the command queues' goroutines; Stop waits for them
	halt       chan struct{}  // closed by Stop: queued and delayed commands are dropped
}

// commandQueue holds the commands of one kind received and not yet taken up, in arrival order. The
// NATS handler only appends to it, so every command received is counted (Pending) at once, not
// only once the NATS client hands it over after the one before it was served.
type commandQueue struct {
	waiting []*nats.Msg   // guarded by Sim.mu
	wake    chan struct{} // cap 1: waiting grew
}

type source struct {
	id        string
	sessionID string
	online    bool
	modes     []string
	streams   []*stream
}

type stream struct {
	id, kind string
	variants []*variant
}

type variant struct {
	capabilities.Variant
	pubID string // "" for the original
}

type publication struct {
	PublicationInfo
	timer *time.Timer
}

// New returns a simulator over nc; it serves nothing until Start. Invalid options make Start fail.
func New(nc *nats.Conn, opts Options) *Sim {
	s := &Sim{
		nc: nc, prefix: opts.Prefix, readyDelay: opts.ReadyDelay, log: opts.Logger, generation: opts.After,
		pubs: map[string]*publication{}, subs: map[string]*SubscriptionInfo{}, failing: map[VariantRef]bool{},
		halt: make(chan struct{}), keepCmds: opts.KeepCommands,
	}
	if s.prefix == "" {
		s.prefix = capabilities.DefaultPrefix
	}
	if s.readyDelay == 0 {
		s.readyDelay = DefaultReadyDelay
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if nc == nil {
		s.optErr = errors.New("sim: nil NATS connection")
	}
	if err := opts.Validate(); err != nil && s.optErr == nil {
		s.optErr = err
	}
	for _, c := range opts.Sources {
		if src, err := newSource(c); err == nil && s.sourceLocked(c.SourceID) == nil {
			s.sources = append(s.sources, src)
		}
	}
	for _, r := range opts.Failing {
		s.failing[r] = true
	}
	return s
}

// Validate reports the first option that cannot work (Start reports it too): a prefix that is not
// one, a negative ReadyDelay or KeepCommands, a source or stream id that breaks the identifier rule,
// or one given twice.
func (o Options) Validate() error {
	switch {
	case o.Prefix != "" && !capabilities.ValidPrefix(o.Prefix):
		return fmt.Errorf("sim: invalid subject prefix %q", o.Prefix)
	case o.ReadyDelay < 0:
		return fmt.Errorf("sim: negative ReadyDelay %v", o.ReadyDelay)
	case o.KeepCommands < 0:
		return fmt.Errorf("sim: negative KeepCommands %d", o.KeepCommands)
	}
	seen := map[string]bool{}
	for _, c := range o.Sources {
		if _, err := newSource(c); err != nil {
			return err
		}
		if seen[c.SourceID] {
			return fmt.Errorf("sim: duplicate source %q", c.SourceID)
		}
		seen[c.SourceID] = true
	}
	return nil
}

func newSource(c SourceConfig) (*source, error) {
	if !capabilities.ValidIdentifier(c.SourceID) {
		return nil, fmt.Errorf("sim: invalid source id %q", c.SourceID)
	}
	streams := c.Streams
	if len(streams) == 0 {
		streams = DefaultStreams()
	}
	modes := c.RecordingModes
	if modes == nil {
		modes = capabilities.RecordingModes()
	}
	src := &source{id: c.SourceID, online: !c.Offline, modes: slices.Clone(modes), sessionID: newID("sess")}
	for _, sc := range streams {
		if !capabilities.ValidIdentifier(sc.StreamID) {
			return nil, fmt.Errorf("sim: source %q: invalid stream id %q", c.SourceID, sc.StreamID)
		}
		if slices.ContainsFunc(src.streams, func(st *stream) bool { return st.id == sc.StreamID }) {
			return nil, fmt.Errorf("sim: source %q: duplicate stream %q", c.SourceID, sc.StreamID)
		}
		st := &stream{id: sc.StreamID, kind: sc.MediaKind}
		st.variants = []*variant{{Variant: capabilities.Variant{
			VariantID: OriginalVariantID, Codec: sc.Codec, Width: sc.Width, Height: sc.Height, State: capabilities.StateReady,
		}}}
		src.streams = append(src.streams, st)
	}
	return src, nil
}

// newID returns prefix-<16 hex digits>, unique for all practical purposes.
func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return prefix + "-" + hex.EncodeToString(b)
}

// Start subscribes to the capability request and command subjects and announces the first generation
// (Options.After+1, unless changes were made before Start); when it returns, the NATS server has both.
// It fails on invalid options, a second call, or a failed subscription (then nothing is served). Call
// Stop when done: it ends the goroutines that serve the commands.
func (s *Sim) Start(ctx context.Context) error {
	if s.optErr != nil {
		return s.optErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("sim: already started or stopped")
	}
	s.started = true
	handlers := map[string]nats.MsgHandler{capabilities.GetSubject(s.prefix): s.handleGet}
	var queues []*commandQueue
	for _, cmd := range capabilities.AllCommands() {
		q := &commandQueue{wake: make(chan struct{}, 1)}
		queues = append(queues, q)
		handlers[capabilities.CommandWildcard(s.prefix, cmd)] = func(m *nats.Msg) { s.receive(q, m) }
	}
	for subj, h := range handlers {
		sub, err := s.nc.Subscribe(subj, h)
		if err != nil {
			s.unsubscribeLocked()
			s.stopped = true
			return fmt.Errorf("sim: subscribe %s: %w", subj, err)
		}
		s.natsSubs = append(s.natsSubs, sub)
	}
	s.bumpLocked("start")
	// When Start returns, the server has the subscriptions and the first announcement.
	if _, ok := ctx.Deadline(); !ok { // FlushWithContext needs one
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		s.unsubscribeLocked()
		s.stopped = true
		return fmt.Errorf("sim: flush: %w", err)
	}
	// Each kind is served in arrival order, the kinds concurrently (commands received meanwhile wait
	// in their queue: Start holds s.mu).
	for _, q := range queues {
		s.serving.Add(1)
		go s.serve(q)
	}
	return nil
}

func (s *Sim) unsubscribeLocked() {
	for _, sub := range s.natsSubs {
		_ = sub.Unsubscribe()
	}
	s.natsSubs = nil
}

// Stop unsubscribes (and flushes, so that the NATS server has dropped the subscriptions when Stop
// returns), stops every pending READY timer, waiting for any that is running, and drops the commands
// still queued or waiting out a command delay (unanswered), waiting for the commands being handled
// and for its goroutines to end. The state
// stays inspectable, and changes made to it afterwards are announced to nobody. Stop may be called
// more than once.
func (s *Sim) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.timers.Wait()
		s.serving.Wait()
		return
	}
	s.stopped = true
	close(s.halt)
	s.unsubscribeLocked()
	for _, p := range s.pubs {
		s.stopTimerLocked(p)
	}
	s.mu.Unlock()
	// Once the server has the unsubscriptions, requests find no responder instead of timing out.
	if s.nc != nil && !s.nc.IsClosed() {
		_ = s.nc.FlushTimeout(time.Second)
	}
	s.timers.Wait() // timer callbacks already running find s.stopped and return
	s.handling.Wait()
	s.serving.Wait() // the queues' goroutines drop what they hold, unanswered
}

// bumpLocked advances the generation and announces it (unless suppressed, or not serving: before
// Start and after Stop, a media server that is not there announces nothing).
func (s *Sim) bumpLocked(why string) {
	s.generation++
	if s.quiet || !s.started || s.stopped {
		return
	}
	data, _ := json.Marshal(capabilities.Changed{Generation: s.generation})
	if err := s.nc.Publish(capabilities.ChangedSubject(s.prefix), data); err != nil {
		s.log.Warn("sim: publish changed", "generation", s.generation, "error", err)
	}
	s.log.Debug("sim: changed", "generation", s.generation, "why", why)
}

// Generation returns the current generation: before Start, Options.After plus one per change made
// since New (none of them announced).
func (s *Sim) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// SuppressChanged turns the announcement of changes off (true) or back on (false). While suppressed,
// changes still advance the generation, but no `changed` message is published: announcements lost in
// transit, for tests of gap handling.
func (s *Sim) SuppressChanged(suppress bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quiet = suppress
}

// Announce publishes `changed` with the current generation, without changing anything. It fails
// before Start and after Stop: a media server that is not serving announces nothing.
func (s *Sim) Announce() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.stopped {
		return errors.New("sim: not serving (not started, or stopped)")
	}
	data, _ := json.Marshal(capabilities.Changed{Generation: s.generation})
	return s.nc.Publish(capabilities.ChangedSubject(s.prefix), data)
}

// Capabilities returns the ServerCapabilities as `caps.v1.get` would answer them now.
func (s *Sim) Capabilities() capabilities.ServerCapabilities {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capabilitiesLocked()
}

func (s *Sim) capabilitiesLocked() capabilities.ServerCapabilities {
	out := capabilities.ServerCapabilities{Generation: s.generation, Sources: make([]capabilities.Source, 0, len(s.sources))}
	for _, src := range s.sources {
		cs := capabilities.Source{
			SourceID: src.id, SessionID: src.sessionID, Online: src.online,
			Streams:     make([]capabilities.Stream, 0, len(src.streams)),
			Publication: capabilities.Publication{RecordingModes: slices.Clone(src.modes)},
		}
		for _, st := range src.streams {
			cst := capabilities.Stream{StreamID: st.id, MediaKind: st.kind, Variants: make([]capabilities.Variant, 0, len(st.variants))}
			for _, v := range st.variants {
				if v.pubID == "" && !src.online {
					continue // an offline source offers nothing
				}
				cst.Variants = append(cst.Variants, v.Variant)
			}
			cs.Streams = append(cs.Streams, cst)
		}
		out.Sources = append(out.Sources, cs)
	}
	return out
}

// Publications returns the live publications, ordered by source, stream and variant.
func (s *Sim) Publications() []PublicationInfo {
	s.mu.Lock()
	out := make([]PublicationInfo, 0, len(s.pubs))
	for _, p := range s.pubs {
		out = append(out, p.PublicationInfo)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b PublicationInfo) int {
		return strings.Compare(a.SourceID+"/"+a.StreamID+"/"+a.VariantID, b.SourceID+"/"+b.StreamID+"/"+b.VariantID)
	})
	return out
}

// Subscriptions returns the live subscriptions, ordered by id.
func (s *Sim) Subscriptions() []SubscriptionInfo {
	s.mu.Lock()
	out := make([]SubscriptionInfo, 0, len(s.subs))
	for _, sub := range s.subs {
		out = append(out, *sub)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b SubscriptionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Commands returns every command received so far (the newest Options.KeepCommands of them when that
// is set), in the order the simulator handled them.
func (s *Sim) Commands() []CommandRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmds := s.commands
	if s.keepCmds > 0 && len(cmds) > s.keepCmds {
		cmds = cmds[len(cmds)-s.keepCmds:]
	}
	return slices.Clone(cmds)
}

// SessionID returns the current session of a source and whether it is online; ok is false for an
// unknown source.
func (s *Sim) SessionID(sourceID string) (sessionID string, online, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.sourceLocked(sourceID)
	if src == nil {
		return "", false, false
	}
	return src.sessionID, src.online, true
}

// AddSource adds a source (a new generation).
func (s *Sim) AddSource(c SourceConfig) error {
	src, err := newSource(c)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sourceLocked(c.SourceID) != nil {
		return fmt.Errorf("sim: duplicate source %q", c.SourceID)
	}
	s.sources = append(s.sources, src)
	s.bumpLocked("source added")
	return nil
}

// SetOnline connects (true) or disconnects (false) a source; a change is a new generation, setting
// the current state again changes nothing. Going offline ends the source's publications (their
// variants leave the capabilities) and subscriptions, and the source's session goes stale; coming
// back gives it a new session_id and its original variants, READY.
func (s *Sim) SetOnline(sourceID string, online bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.sourceLocked(sourceID)
	if src == nil {
		return fmt.Errorf("sim: unknown source %q", sourceID)
	}
	if src.online == online {
		return nil
	}
	src.online = online
	if online {
		src.sessionID = newID("sess")
		s.log.Info("sim: source online", "source_id", sourceID, "session_id", src.sessionID)
		s.bumpLocked("source online")
		return nil
	}
	for id, p := range s.pubs {
		if p.SourceID == sourceID {
			s.endPublicationLocked(id)
		}
	}
	for id, sub := range s.subs {
		if sub.SourceID == sourceID {
			delete(s.subs, id)
		}
	}
	s.log.Info("sim: source offline", "source_id", sourceID)
	s.bumpLocked("source offline")
	return nil
}

// SetRecordingModes changes the recording modes a source allows its publications to ask for (nil:
// none), as a media server does that loses (or regains) its recording storage: a new generation
// when they change. Publications already running keep the mode they were started with; a
// start_publication asking for a mode no longer allowed is RECORDING_MODE_INVALID.
func (s *Sim) SetRecordingModes(sourceID string, modes []string) error {
	for _, m := range modes {
		if !capabilities.ValidRecordingMode(m) {
			return fmt.Errorf("sim: invalid recording mode %q", m)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src := s.sourceLocked(sourceID)
	if src == nil {
		return fmt.Errorf("sim: unknown source %q", sourceID)
	}
	if slices.Equal(src.modes, modes) {
		return nil
	}
	src.modes = slices.Clone(modes)
	s.log.Info("sim: recording modes", "source_id", sourceID, "modes", modes)
	s.bumpLocked("recording modes")
	return nil
}

// SetFailing makes publications of a variant turn FAILED instead of READY (failing true) or READY
// again (false). It affects publications that are still PENDING and later ones.
func (s *Sim) SetFailing(ref VariantRef, failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if failing {
		s.failing[ref] = true
	} else {
		delete(s.failing, ref)
	}
}

// FailPublication makes live publication id fail now, as a real media server's does when its
// encoder dies after the variant was READY (or before): its variant turns FAILED, still held by its
// publisher, and the subscriptions to it end; a new generation. The publisher stops it or starts it
// again (a takeover). SetFailing only decides how a PENDING publication ends; this is the failure a
// worker that stopped looking once the variant was READY would miss.
func (s *Sim) FailPublication(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pubs[id]
	if p == nil {
		return fmt.Errorf("sim: no publication %q", id)
	}
	v := s.sourceLocked(p.SourceID).stream(p.StreamID).variant(p.VariantID)
	if v == nil || v.pubID != id {
		return fmt.Errorf("sim: publication %q has no variant", id)
	}
	if v.State == capabilities.StateFailed {
		return nil
	}
	s.stopTimerLocked(p)
	v.State = capabilities.StateFailed
	for sid, sub := range s.subs {
		if sub.SourceID == p.SourceID && sub.StreamID == p.StreamID && sub.VariantID == p.VariantID {
			delete(s.subs, sid)
		}
	}
	s.log.Info("sim: variant FAILED", "source_id", p.SourceID, "stream_id", p.StreamID, "variant_id", p.VariantID, "publication_id", id)
	s.bumpLocked("variant FAILED")
	return nil
}

func (s *Sim) sourceLocked(id string) *source {
	for _, src := range s.sources {
		if src.id == id {
			return src
		}
	}
	return nil
}

func (src *source) stream(id string) *stream {
	for _, st := range src.streams {
		if st.id == id {
			return st
		}
	}
	return nil
}

func (st *stream) variant(id string) *variant {
	for _, v := range st.variants {
		if v.VariantID == id {
			return v
		}
	}
	return nil
}

func (st *stream) removeVariant(id string) {
	st.variants = slices.DeleteFunc(st.variants, func(v *variant) bool { return v.VariantID == id })
}

// endPublicationLocked removes publication id, its variant and the subscriptions to that variant. It
// does not bump the generation.
func (s *Sim) endPublicationLocked(id string) {
	p := s.pubs[id]
	if p == nil {
		return
	}
	s.stopTimerLocked(p)
	delete(s.pubs, id)
	if src := s.sourceLocked(p.SourceID); src != nil {
		if st := src.stream(p.StreamID); st != nil {
			st.removeVariant(p.VariantID)
		}
	}
	for sid, sub := range s.subs {
		if sub.SourceID == p.SourceID && sub.StreamID == p.StreamID && sub.VariantID == p.VariantID {
			delete(s.subs, sid)
		}
	}
}

func (s *Sim) stopTimerLocked(p *publication) {
	if p.timer != nil && p.timer.Stop() {
		s.timers.Done() // the callback will not run
	}
	p.timer = nil
}

// ready runs ReadyDelay after publication id started: its variant turns READY or FAILED.
func (s *Sim) ready(id string) {
	defer s.timers.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pubs[id]
	if s.stopped || p == nil {
		return
	}
	p.timer = nil
	src := s.sourceLocked(p.SourceID)
	st := src.stream(p.StreamID)
	v := st.variant(p.VariantID)
	if v == nil || v.pubID != id || v.State != capabilities.StatePending {
		return
	}
	v.State = capabilities.StateReady
	if s.failing[VariantRef{SourceID: p.SourceID, StreamID: p.StreamID, VariantID: p.VariantID}] {
		v.State = capabilities.StateFailed
	}
	s.log.Info("sim: variant "+string(v.State), "source_id", p.SourceID, "stream_id", p.StreamID, "variant_id", p.VariantID, "publication_id", id)
	s.bumpLocked("variant " + string(v.State))
}

// inboxReply reports whether m's reply subject is an inbox (_INBOX.…), the only subject the media
// server answers on, logging a request it drops (at Debug: whoever sends them chooses how many). The media principal may publish its announcements
// on caps.v1.changed, and NATS cannot tell an answer there from an announcement: answering a request
// that names it (or any other subject but an inbox) would let any principal have every tracker read
// the answer as an announcement. A command whose answer nobody could read is not carried out.
func (s *Sim) inboxReply(m *nats.Msg) bool {
	if strings.HasPrefix(m.Reply, "_INBOX.") {
		return true
	}
	s.log.Debug("sim: request dropped: its reply subject is no inbox", "subject", m.Subject, "reply", m.Reply)
	return false
}

// handleGet answers caps.v1.get with the whole ServerCapabilities. It counts as handling, so a Stop
// that has returned has no answer of it left to send: a stopped server answers nothing.
func (s *Sim) handleGet(m *nats.Msg) {
	if !s.inboxReply(m) {
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.handling.Add(1)
	defer s.handling.Done()
	data, err := json.Marshal(s.capabilitiesLocked())
	s.mu.Unlock()
	if err != nil {
		s.log.Error("sim: encode capabilities", "error", err)
		return
	}
	if err := m.Respond(data); err != nil {
		s.log.Warn("sim: respond to caps get", "error", err)
	}
}

// SetCommandDelay makes every media command taken up from now on (those already queued included)
// wait d before it is carried out and answered, as on a slow or overloaded media server (0: at once).
// Commands of different kinds are served concurrently, each kind in arrival order: a command waits
// for the ones of its kind received before it, and then for its own delay.
func (s *Sim) SetCommandDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmdDelay = max(d, 0)
}

// Pending returns how many media commands were received and are not answered yet (see
// SetCommandDelay): the one of each kind being served and those queued behind it. A command is no
// longer pending once its outcome is recorded (Commands), before its reply is sent; after Stop none
// is.
func (s *Sim) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// receive queues a media command (the NATS handler of a command subject).
func (s *Sim) receive(q *commandQueue, m *nats.Msg) {
	if !s.inboxReply(m) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return // a stopped server answers nothing
	}
	q.waiting = append(q.waiting, m)
	s.pending++
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// serve serves the commands of q, one at a time in arrival order, until Stop; it drops those left
// unanswered.
func (s *Sim) serve(q *commandQueue) {
	defer s.serving.Done()
	s.mu.Lock()
	for {
		if s.stopped {
			s.pending -= len(q.waiting)
			q.waiting = nil
			s.mu.Unlock()
			return
		}
		if len(q.waiting) == 0 {
			s.mu.Unlock()
			select {
			case <-q.wake:
			case <-s.halt:
			}
			s.mu.Lock()
			continue
		}
		m := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		delay := s.cmdDelay
		s.mu.Unlock()
		s.handleCommand(m, delay)
		s.mu.Lock()
	}
}

// handleCommand serves one media command taken from its queue, after delay; it is no longer pending
// once answered or dropped.
func (s *Sim) handleCommand(m *nats.Msg, delay time.Duration) {
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.halt:
			t.Stop()
			s.mu.Lock()
			s.pending--
			s.mu.Unlock()
			return // a stopped server answers nothing
		}
	}
	principal, cmd, ok := capabilities.ParseCommandSubject(s.prefix, m.Subject)
	if !ok {
		// Record the raw token so a test sees who tried.
		principal, _, _ = strings.Cut(strings.TrimPrefix(m.Subject, s.prefix+".media.v1."), ".")
	}
	var reply capabilities.Reply
	s.mu.Lock()
	s.pending--
	if s.stopped {
		s.mu.Unlock()
		return // a stopped server answers nothing
	}
	if !ok {
		reply = capabilities.ErrorReply(capabilities.Errorf(capabilities.CodeInvalidArgument, "subject %q is not a media command subject", m.Subject))
	} else {
		reply = s.executeLocked(principal, cmd, m.Data)
	}
	s.recordLocked(CommandRecord{Principal: principal, Command: cmd, Body: slices.Clone(m.Data), Reply: reply})
	s.mu.Unlock()
	attrs := []any{"principal", principal, "command", cmd, "body", string(m.Data)}
	if reply.OK {
		s.log.Info("sim: command ok", append(attrs, "reply", fmt.Sprintf("%+v", reply))...)
	} else {
		s.log.Info("sim: command failed", append(attrs, "error", reply.Error.Error())...)
	}
	if err := m.Respond(encodeReply(reply)); err != nil {
		s.log.Warn("sim: respond", "command", cmd, "error", err)
	}
}

// encodeReply encodes a command's reply: the envelope (capabilities.Reply) and, for an error, its
// code and message at the top level too, as SPEC section 12 writes errors ({code, message}), so that
// a client written from the SPEC alone reads them. A result's fields are at the top level already.
func encodeReply(r capabilities.Reply) []byte {
	if r.OK || r.Error == nil {
		data, _ := json.Marshal(r)
		return data
	}
	data, _ := json.Marshal(struct {
		capabilities.Reply
		Code    capabilities.Code `json:"code"`
		Message string            `json:"message"`
	}{r, r.Error.Code, r.Error.Message})
	return data
}

// recordLocked appends r to the commands, keeping the newest keepCmds when that is set (the older
// ones are copied out at twice the bound, so that trimming costs little and frees their memory).
func (s *Sim) recordLocked(r CommandRecord) {
	s.commands = append(s.commands, r)
	if s.keepCmds > 0 && len(s.commands) >= 2*s.keepCmds {
		s.commands = slices.Clone(s.commands[len(s.commands)-s.keepCmds:])
	}
}

// decode decodes body strictly into v: unknown fields and trailing data are INVALID_ARGUMENT.
func decode(body []byte, v any) *capabilities.Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return capabilities.Errorf(capabilities.CodeInvalidArgument, "malformed request: %v", err)
	}
	// More is false before a stray ']' or '}': only the end of the body ends the request.
	if _, err := dec.Token(); err != io.EOF {
		return capabilities.Errorf(capabilities.CodeInvalidArgument, "malformed request: data after the object")
	}
	return nil
}

// identifiers checks name/value pairs against the identifier rule, in order.
func identifiers(pairs ...string) *capabilities.Error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !capabilities.ValidIdentifier(pairs[i+1]) {
			return capabilities.Errorf(capabilities.CodeInvalidArgument, "invalid %s %q", pairs[i], pairs[i+1])
		}
	}
	return nil
}

func (s *Sim) executeLocked(principal string, cmd capabilities.Command, body []byte) capabilities.Reply {
	var (
		r   capabilities.Reply
		err *capabilities.Error
	)
	switch cmd {
	case capabilities.CommandStartPublication:
		r, err = s.startPublicationLocked(principal, body)
	case capabilities.CommandStopPublication:
		r, err = s.stopPublicationLocked(principal, body)
	case capabilities.CommandSubscribe:
		r, err = s.subscribeLocked(principal, body)
	case capabilities.CommandUnsubscribe:
		r, err = s.unsubscribeCmdLocked(principal, body)
	default:
		err = capabilities.Errorf(capabilities.CodeInvalidArgument, "unknown command %q", cmd)
	}
	if err != nil {
		return capabilities.ErrorReply(err)
	}
	r.OK = true
	return r
}

// sessionLocked finds the online source whose current session is sessionID.
func (s *Sim) sessionLocked(sessionID string) (*source, *capabilities.Error) {
	for _, src := range s.sources {
		if src.sessionID == sessionID {
			if !src.online {
				return nil, capabilities.Errorf(capabilities.CodeSourceUnavailable, "source %q is offline", src.id)
			}
			return src, nil
		}
	}
	return nil, capabilities.Errorf(capabilities.CodeSourceUnavailable, "no source has session %q (stale or unknown)", sessionID)
}

func (s *Sim) startPublicationLocked(principal string, body []byte) (capabilities.Reply, *capabilities.Error) {
	var req capabilities.StartPublicationRequest
	if err := decode(body, &req); err != nil {
		return capabilities.Reply{}, err
	}
	// The mode first: a zero-value StartPublication is RECORDING_MODE_INVALID.
	if !capabilities.ValidRecordingMode(req.RecordingMode) {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeRecordingModeInvalid, "recording_mode %q is not one of inherit, disabled, required", req.RecordingMode)
	}
	if err := identifiers("session_id", req.SessionID, "stream_id", req.StreamID, "variant_id", req.VariantID, "output_profile", req.OutputProfile); err != nil {
		return capabilities.Reply{}, err
	}
	src, err := s.sessionLocked(req.SessionID)
	if err != nil {
		return capabilities.Reply{}, err
	}
	st := src.stream(req.StreamID)
	if st == nil {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeSourceUnavailable, "source %q has no stream %q", src.id, req.StreamID)
	}
	if !slices.Contains(src.modes, req.RecordingMode) {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeRecordingModeInvalid, "source %q does not allow recording_mode %q (allowed: %v)", src.id, req.RecordingMode, src.modes)
	}
	if v := st.variant(req.VariantID); v != nil {
		switch {
		case v.pubID == "":
			return capabilities.Reply{}, capabilities.Errorf(capabilities.CodePublicationConflict, "variant %q of %s/%s is the source's own", req.VariantID, src.id, st.id)
		case v.Publisher != principal:
			return capabilities.Reply{}, capabilities.Errorf(capabilities.CodePublicationConflict, "variant %q of %s/%s is published by %q", req.VariantID, src.id, st.id, v.Publisher)
		}
		s.endPublicationLocked(v.pubID) // the same principal takes it over
	}
	codec, w, h := ParseOutputProfile(req.OutputProfile)
	p := &publication{PublicationInfo: PublicationInfo{
		ID: newID("pub"), Principal: principal, SourceID: src.id, SessionID: src.sessionID, StreamID: st.id,
		VariantID: req.VariantID, OutputProfile: req.OutputProfile, RecordingMode: req.RecordingMode,
	}}
	st.variants = append(st.variants, &variant{pubID: p.ID, Variant: capabilities.Variant{
		VariantID: req.VariantID, Codec: codec, Width: w, Height: h, State: capabilities.StatePending, Publisher: principal,
	}})
	s.pubs[p.ID] = p
	if !s.stopped {
		s.timers.Add(1)
		id := p.ID
		p.timer = time.AfterFunc(s.readyDelay, func() { s.ready(id) })
	}
	s.bumpLocked("publication started")
	return capabilities.Reply{PublicationID: p.ID, VariantID: req.VariantID}, nil
}

func (s *Sim) stopPublicationLocked(principal string, body []byte) (capabilities.Reply, *capabilities.Error) {
	var req capabilities.StopPublicationRequest
	if err := decode(body, &req); err != nil {
		return capabilities.Reply{}, err
	}
	if err := identifiers("publication_id", req.PublicationID); err != nil {
		return capabilities.Reply{}, err
	}
	p := s.pubs[req.PublicationID]
	if p == nil || p.Principal != principal {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodePublicationNotFound, "no publication %q of %q", req.PublicationID, principal)
	}
	s.endPublicationLocked(p.ID)
	s.bumpLocked("publication stopped")
	return capabilities.Reply{}, nil
}

func (s *Sim) subscribeLocked(principal string, body []byte) (capabilities.Reply, *capabilities.Error) {
	var req capabilities.SubscribeRequest
	if err := decode(body, &req); err != nil {
		return capabilities.Reply{}, err
	}
	if err := identifiers("session_id", req.SessionID, "stream_id", req.StreamID); err != nil {
		return capabilities.Reply{}, err
	}
	if req.VariantID != "" && !capabilities.ValidIdentifier(req.VariantID) {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeInvalidArgument, "invalid variant_id %q", req.VariantID)
	}
	src, err := s.sessionLocked(req.SessionID)
	if err != nil {
		return capabilities.Reply{}, err
	}
	st := src.stream(req.StreamID)
	if st == nil {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeVariantNotReady, "source %q has no stream %q", src.id, req.StreamID)
	}
	var v *variant
	if req.VariantID == "" {
		v = st.variant(OriginalVariantID)
	} else {
		v = st.variant(req.VariantID)
	}
	if v == nil {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeVariantNotReady, "%s/%s has no variant %q", src.id, st.id, req.VariantID)
	}
	if v.State != capabilities.StateReady {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeVariantNotReady, "variant %q of %s/%s is %s", v.VariantID, src.id, st.id, v.State)
	}
	sub := &SubscriptionInfo{ID: newID("sub"), Principal: principal, SourceID: src.id, SessionID: src.sessionID, StreamID: st.id, VariantID: v.VariantID}
	s.subs[sub.ID] = sub
	return capabilities.Reply{SubscriptionID: sub.ID, VariantID: v.VariantID}, nil
}

func (s *Sim) unsubscribeCmdLocked(principal string, body []byte) (capabilities.Reply, *capabilities.Error) {
	var req capabilities.UnsubscribeRequest
	if err := decode(body, &req); err != nil {
		return capabilities.Reply{}, err
	}
	if err := identifiers("subscription_id", req.SubscriptionID); err != nil {
		return capabilities.Reply{}, err
	}
	sub := s.subs[req.SubscriptionID]
	if sub == nil || sub.Principal != principal {
		return capabilities.Reply{}, capabilities.Errorf(capabilities.CodeSubscriptionNotFound, "no subscription %q of %q", req.SubscriptionID, principal)
	}
	delete(s.subs, sub.ID)
	return capabilities.Reply{}, nil
}

// resolutions maps a resolution token of an output profile to its width and height.
var resolutions = map[string][2]int{
	"2160p": {3840, 2160}, "1440p": {2560, 1440}, "1080p": {1920, 1080}, "720p": {1280, 720},
	"540p": {960, 540}, "480p": {854, 480}, "360p": {640, 360}, "240p": {426, 240},
}

// codecs are the codec tokens an output profile may name.
var codecs = []string{"h264", "h265", "hevc", "vp8", "vp9", "av1", "mjpeg", "jpeg", "opus", "aac", "pcmu", "pcma"}

// ParseOutputProfile derives a variant's codec and size from an output profile: the profile's
// dash-separated tokens are searched for a codec (h264, vp9, opus, ...) and a resolution (720p,
// 1080p, ...). "browser-h264-720p" is h264 1280x720; "opus-48k" is opus 0x0; a profile naming no known
// codec is "unknown" 0x0.
func ParseOutputProfile(profile string) (codec string, width, height int) {
	codec = "unknown"
	var known bool
	var res [2]int
	for tok := range strings.SplitSeq(strings.ToLower(profile), "-") {
		if !known && slices.Contains(codecs, tok) {
			codec, known = tok, true
		}
		if r, ok := resolutions[tok]; ok && res == [2]int{} {
			res = r
		}
	}
	if !known {
		return "unknown", 0, 0
	}
	return codec, res[0], res[1]
}
