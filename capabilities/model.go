package capabilities

import "slices"

// VariantState is the state of a media variant in ServerCapabilities.
type VariantState string

// The variant states of SPEC section 12.
const (
	// StatePending: the variant was requested (a publication started) and is not yet available.
	StatePending VariantState = "PENDING"
	// StateReady: the variant exists and can be subscribed to. Only a READY variant means an output
	// is really there.
	StateReady VariantState = "READY"
	// StateFailed: the media server gave up producing the variant.
	StateFailed VariantState = "FAILED"
)

// Valid reports whether s is one of PENDING, READY and FAILED.
func (s VariantState) Valid() bool {
	return s == StatePending || s == StateReady || s == StateFailed
}

// The recording modes of a StartPublication (SPEC section 13, keeppeek.media-intent.v1). A missing or
// unknown mode is PUBLICATION_ERROR_CODE_RECORDING_MODE_INVALID.
const (
	RecordingModeInherit  = "inherit"
	RecordingModeDisabled = "disabled"
	RecordingModeRequired = "required"
)

// RecordingModes lists every valid recording mode.
func RecordingModes() []string {
	return []string{RecordingModeInherit, RecordingModeDisabled, RecordingModeRequired}
}

// ValidRecordingMode reports whether m is inherit, disabled or required.
func ValidRecordingMode(m string) bool {
	return m == RecordingModeInherit || m == RecordingModeDisabled || m == RecordingModeRequired
}

// The media kinds of a stream.
const (
	MediaKindVideo = "video"
	MediaKindAudio = "audio"
)

// ServerCapabilities is what the media server says exists, at one generation: its sources, their
// streams and the variants of each stream. It is the reply of `<prefix>.caps.v1.get`.
type ServerCapabilities struct {
	// Generation grows by at least one on every change; a client holding generation G that learns of
	// a higher one fetches again.
	Generation uint64 `json:"generation"`
	// Sources are the media sources (cameras, microphones) the server knows, online or not.
	Sources []Source `json:"sources"`
}

// Source is one media source. SourceID is stable (intents name it); SessionID is transient: a source
// that reconnects gets a new one, and commands naming an old session fail with SOURCE_UNAVAILABLE.
type Source struct {
	SourceID  string `json:"source_id"`
	SessionID string `json:"session_id"`
	// Online is false while the source is disconnected; its SessionID is then stale.
	Online      bool        `json:"online"`
	Streams     []Stream    `json:"streams"`
	Publication Publication `json:"publication"`
}

// Stream is one logical stream of a source (stream_id "video", "audio", ...) and its variants.
type Stream struct {
	StreamID string `json:"stream_id"`
	// MediaKind is "video" or "audio".
	MediaKind string    `json:"media_kind"`
	Variants  []Variant `json:"variants"`
}

// Variant is one encoding of a stream: the original one the source provides (Publisher empty) or
// one a principal published with start_publication (Publisher is that principal).
type Variant struct {
	VariantID string       `json:"variant_id"`
	Codec     string       `json:"codec"`
	Width     int          `json:"width"`
	Height    int          `json:"height"`
	State     VariantState `json:"state"`
	// Publisher is the principal whose publication produces the variant; empty for the source's own.
	Publisher string `json:"publisher"`
	// ReadySince is not on the wire: a Tracker sets it on a READY variant of the snapshots it
	// installs. It is the generation from which the tracker has seen the variant READY in every
	// generation, from the same publisher on the same session of its source. A takeover (its
	// publisher starting it again, the variant PENDING and then READY under a new publication, the
	// subscriptions to it ended) starts it over, and so does anything the tracker cannot rule one
	// out across: generations it skipped (a coalesced fetch, a lost announcement), a stale snapshot.
	// A subscription made while the variant was READY since R is to the publication that still
	// produces it as long as ReadySince is still R, even when the generations between are never
	// read: a subscriber that finds another value resubscribes (its subscription may have ended
	// unseen). Zero for a variant that is not READY, and for capabilities not read from a Tracker.
	ReadySince uint64 `json:"-"`
}

// Publication describes what a source allows publications of its streams to request.
type Publication struct {
	// RecordingModes are the recording modes a start_publication on this source may ask for.
	RecordingModes []string `json:"recording_modes"`
}

// Source returns the source whose stable id is sourceID. The result shares its slices with c.
func (c ServerCapabilities) Source(sourceID string) (Source, bool) {
	for _, s := range c.Sources {
		if s.SourceID == sourceID {
			return s, true
		}
	}
	return Source{}, false
}

// SourceBySession returns the source whose current session is sessionID.
func (c ServerCapabilities) SourceBySession(sessionID string) (Source, bool) {
	for _, s := range c.Sources {
		if s.SessionID == sessionID {
			return s, true
		}
	}
	return Source{}, false
}

// Stream returns stream streamID of source sourceID.
func (c ServerCapabilities) Stream(sourceID, streamID string) (Stream, bool) {
	s, ok := c.Source(sourceID)
	if !ok {
		return Stream{}, false
	}
	return s.Stream(streamID)
}

// Variant returns variant variantID of stream streamID of source sourceID.
func (c ServerCapabilities) Variant(sourceID, streamID, variantID string) (Variant, bool) {
	st, ok := c.Stream(sourceID, streamID)
	if !ok {
		return Variant{}, false
	}
	return st.Variant(variantID)
}

// Clone returns a deep copy of c.
func (c ServerCapabilities) Clone() ServerCapabilities {
	out := ServerCapabilities{Generation: c.Generation}
	if c.Sources != nil {
		out.Sources = make([]Source, len(c.Sources))
		for i, s := range c.Sources {
			out.Sources[i] = s.Clone()
		}
	}
	return out
}

// Stream returns the stream of s whose id is streamID.
func (s Source) Stream(streamID string) (Stream, bool) {
	for _, st := range s.Streams {
		if st.StreamID == streamID {
			return st, true
		}
	}
	return Stream{}, false
}

// StreamByKind returns the first stream of s whose media kind is kind, for an intent that names a
// media kind but no stream_id.
func (s Source) StreamByKind(kind string) (Stream, bool) {
	for _, st := range s.Streams {
		if st.MediaKind == kind {
			return st, true
		}
	}
	return Stream{}, false
}

// AllowsRecordingMode reports whether a publication of s may ask for recording mode m.
func (s Source) AllowsRecordingMode(m string) bool {
	return slices.Contains(s.Publication.RecordingModes, m)
}

// Clone returns a deep copy of s.
func (s Source) Clone() Source {
	out := s
	out.Publication.RecordingModes = slices.Clone(s.Publication.RecordingModes)
	if s.Streams != nil {
		out.Streams = make([]Stream, len(s.Streams))
		for i, st := range s.Streams {
			out.Streams[i] = st.Clone()
		}
	}
	return out
}

// Variant returns the variant of st whose id is variantID.
func (st Stream) Variant(variantID string) (Variant, bool) {
	for _, v := range st.Variants {
		if v.VariantID == variantID {
			return v, true
		}
	}
	return Variant{}, false
}

// Original returns the stream's own variant: the first one without a publisher. It is the variant a
// subscribe without variant_id gets.
func (st Stream) Original() (Variant, bool) {
	for _, v := range st.Variants {
		if v.Publisher == "" {
			return v, true
		}
	}
	return Variant{}, false
}

// Clone returns a deep copy of st.
func (st Stream) Clone() Stream {
	out := st
	out.Variants = slices.Clone(st.Variants)
	return out
}

// Changed is the message of `<prefix>.caps.v1.changed`: the generation the capabilities now have.
type Changed struct {
	Generation uint64 `json:"generation"`
}
