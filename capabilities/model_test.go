package capabilities_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/keeppeek/coordination/capabilities"
)

func TestCapabilitiesJSONNames(t *testing.T) {
	c := capabilities.ServerCapabilities{Generation: 7, Sources: []capabilities.Source{{
		SourceID: "front-door", SessionID: "s1", Online: true,
		Streams: []capabilities.Stream{{StreamID: "video", MediaKind: "video", Variants: []capabilities.Variant{
			{VariantID: "source", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady},
		}}},
		Publication: capabilities.Publication{RecordingModes: []string{"inherit"}},
	}}}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"generation":7,"sources":[{"source_id":"front-door","session_id":"s1","online":true,"streams":[{"stream_id":"video","media_kind":"video","variants":[{"variant_id":"source","codec":"h264","width":1920,"height":1080,"state":"READY","publisher":""}]}],"publication":{"recording_modes":["inherit"]}}]}`
	if string(data) != want {
		t.Errorf("JSON\n got %s\nwant %s", data, want)
	}
	if s, ok := c.SourceBySession("s1"); !ok || s.SourceID != "front-door" {
		t.Error("SourceBySession")
	}
	if st, ok := c.Sources[0].StreamByKind("video"); !ok || st.StreamID != "video" {
		t.Error("StreamByKind")
	}
	if v, ok := c.Sources[0].Streams[0].Original(); !ok || v.VariantID != "source" {
		t.Error("Original")
	}
	if !c.Sources[0].AllowsRecordingMode("inherit") || c.Sources[0].AllowsRecordingMode("required") {
		t.Error("AllowsRecordingMode")
	}
	if _, ok := c.Variant("front-door", "audio", "source"); ok {
		t.Error("Variant found a missing stream")
	}
}

func TestReplyEnvelope(t *testing.T) {
	for _, tc := range []struct {
		r    capabilities.Reply
		want string
	}{
		{capabilities.Reply{OK: true, PublicationID: "p1", VariantID: "v"}, `{"ok":true,"publication_id":"p1","variant_id":"v"}`},
		{capabilities.Reply{OK: true}, `{"ok":true}`},
		{capabilities.ErrorReply(capabilities.Errorf(capabilities.CodeVariantNotReady, "not yet")),
			`{"ok":false,"error":{"code":"SUBSCRIPTION_ERROR_CODE_VARIANT_NOT_READY","message":"not yet"}}`},
	} {
		data, _ := json.Marshal(tc.r)
		if string(data) != tc.want {
			t.Errorf("got %s, want %s", data, tc.want)
		}
	}
	req, _ := json.Marshal(capabilities.StartPublicationRequest{SessionID: "s", StreamID: "video", VariantID: "v", OutputProfile: "p", RecordingMode: "inherit"})
	if want := `{"session_id":"s","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}`; string(req) != want {
		t.Errorf("start_publication body %s", req)
	}
	sub, _ := json.Marshal(capabilities.SubscribeRequest{SessionID: "s", StreamID: "video"})
	if want := `{"session_id":"s","stream_id":"video"}`; string(sub) != want {
		t.Errorf("subscribe body %s (variant_id must be absent when empty)", sub)
	}
}

func TestErrorIsByCode(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", capabilities.Errorf(capabilities.CodePublicationConflict, "owned by bob"))
	if !errors.Is(err, capabilities.ErrPublicationConflict) || errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Error("errors.Is by code")
	}
	if capabilities.CodeOf(err) != capabilities.CodePublicationConflict || capabilities.CodeOf(errors.New("x")) != "" {
		t.Error("CodeOf")
	}
	for _, tc := range []struct {
		sentinel *capabilities.Error
		code     string
	}{
		{capabilities.ErrRecordingModeInvalid, "PUBLICATION_ERROR_CODE_RECORDING_MODE_INVALID"},
		{capabilities.ErrPublicationConflict, "PUBLICATION_ERROR_CODE_CONFLICT"},
		{capabilities.ErrSourceUnavailable, "PUBLICATION_ERROR_CODE_SOURCE_UNAVAILABLE"},
		{capabilities.ErrVariantNotReady, "SUBSCRIPTION_ERROR_CODE_VARIANT_NOT_READY"},
		{capabilities.ErrSubscriptionNotFound, "SUBSCRIPTION_ERROR_CODE_NOT_FOUND"},
		{capabilities.ErrPublicationNotFound, "PUBLICATION_ERROR_CODE_NOT_FOUND"},
		{capabilities.ErrInvalidArgument, "MEDIA_ERROR_CODE_INVALID_ARGUMENT"},
	} {
		if string(tc.sentinel.Code) != tc.code {
			t.Errorf("sentinel code %s, want %s", tc.sentinel.Code, tc.code)
		}
	}
}

func TestSubjects(t *testing.T) {
	if got := capabilities.GetSubject("kp"); got != "kp.caps.v1.get" {
		t.Error(got)
	}
	if got := capabilities.ChangedSubject("x.y"); got != "x.y.caps.v1.changed" {
		t.Error(got)
	}
	if got := capabilities.CommandSubject("kp", "alice", capabilities.CommandStartPublication); got != "kp.media.v1.alice.start_publication" {
		t.Error(got)
	}
	if got := capabilities.CommandWildcard("kp", capabilities.CommandSubscribe); got != "kp.media.v1.*.subscribe" {
		t.Error(got)
	}
	p, c, ok := capabilities.ParseCommandSubject("kp", "kp.media.v1.alice.stop_publication")
	if !ok || p != "alice" || c != capabilities.CommandStopPublication {
		t.Errorf("parse: %q %q %v", p, c, ok)
	}
	for _, bad := range []string{"kp.media.v1.alice.reboot", "kp.media.v1.Alice.subscribe", "kp.media.v1.alice", "xx.media.v1.alice.subscribe", "kp.media.v1.a.b.subscribe"} {
		if _, _, ok := capabilities.ParseCommandSubject("kp", bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
	for s, want := range map[string]bool{"front-door": true, "a.b_c-D9": true, "": false, ".": false, "..": false, "a/b": false, "a b": false} {
		if capabilities.ValidIdentifier(s) != want {
			t.Errorf("ValidIdentifier(%q) != %v", s, want)
		}
	}
	for s, want := range map[string]bool{"kp": true, "a.b": true, "": false, "a..b": false, "a.*": false, "a.>": false} {
		if capabilities.ValidPrefix(s) != want {
			t.Errorf("ValidPrefix(%q) != %v", s, want)
		}
	}
	for s, want := range map[string]bool{"alice": true, "0x": true, "a_b-c": true, "_a": false, "A": false, "a.b": false, "": false} {
		if capabilities.ValidPrincipal(s) != want {
			t.Errorf("ValidPrincipal(%q) != %v", s, want)
		}
	}
}
