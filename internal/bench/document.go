package bench

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keeppeek/coordination/store/wire"
)

// DocumentSchema is the schema of every document the bench writes.
const DocumentSchema = wire.SchemaMediaIntent

// DocumentBytes is the compact size of the bench document: a realistic, fairly large intent.
const DocumentBytes = 2193

// intent is a keeppeek.media-intent.v1 document; the field order fixes the encoding.
type intent struct {
	Role          string                       `json:"role"`
	Desired       bool                         `json:"desired"`
	SourceID      string                       `json:"source_id"`
	MediaKind     string                       `json:"media_kind"`
	StreamID      string                       `json:"stream_id"`
	VariantID     string                       `json:"variant_id"`
	OutputProfile string                       `json:"output_profile"`
	Priority      int                          `json:"priority"`
	RecordingMode string                       `json:"recording_mode"`
	Parameters    map[string]map[string]string `json:"parameters"`
}

// words pad the document: plain prose with spaces, so the content guard (which rejects long strings
// made almost only of base64 or hex characters) accepts it.
var words = strings.Fields(`keep the front door camera in the archive at full rate while the lobby is
open and drop to a low rate at night when no one is in the hall so that the disk lasts a full month
and the viewer on the desk still sees a live picture within a second of a motion event`)

// Document returns a schema-valid keeppeek.media-intent.v1 document (role publish, recording_mode
// set) whose compact JSON encoding is exactly size bytes: a parameters object for the service
// "bench" holds a "notes" string of plain words sized to fit.
func Document(size int) (json.RawMessage, error) {
	d := intent{Role: "publish", Desired: true, SourceID: "front-door", MediaKind: "video", StreamID: "main",
		VariantID: "h264-720p", OutputProfile: "browser-h264-720p", Priority: 500, RecordingMode: "required",
		Parameters: map[string]map[string]string{"bench": {"notes": ""}}}
	base, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	n := size - len(base)
	if n < 0 {
		return nil, fmt.Errorf("bench: a document needs at least %d bytes, asked for %d", len(base), size)
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[i%len(words)])
	}
	notes := b.String()[:n]
	if strings.HasSuffix(notes, " ") { // end on a letter
		notes = notes[:n-1] + "s"
	}
	d.Parameters["bench"]["notes"] = notes
	doc, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	if len(doc) != size {
		return nil, fmt.Errorf("bench: document came out at %d bytes, want %d", len(doc), size)
	}
	return doc, nil
}
