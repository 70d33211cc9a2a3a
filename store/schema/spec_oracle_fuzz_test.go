package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// specRule is SPEC section 13's rule for one property: it returns why v (decoded with UseNumber) breaks
// it, or "".
type specRule func(v any) string

func ruleString(v any) string {
	if _, ok := v.(string); !ok {
		return "not a string"
	}
	return ""
}

func ruleMatch(name string, valid func(string) bool) specRule {
	return func(v any) string {
		s, ok := v.(string)
		if !ok || !valid(s) {
			return "not a " + name
		}
		return ""
	}
}

func ruleEnum(values ...string) specRule {
	return func(v any) string {
		if s, ok := v.(string); !ok || !slices.Contains(values, s) {
			return "not one of " + strings.Join(values, ", ")
		}
		return ""
	}
}

// ruleInt accepts a JSON number whose value is an integer from lo to hi, however it is spelled (JSON
// Schema's "integer"; wire.Integer reads it so).
func ruleInt(lo, hi int64) specRule {
	return func(v any) string {
		n, ok := v.(json.Number)
		if !ok {
			return "not a number"
		}
		i, ok := wire.Integer(json.RawMessage(n))
		if !ok || i < lo || i > hi {
			return fmt.Sprintf("not an integer from %d to %d", lo, hi)
		}
		return ""
	}
}

func ruleBool(v any) string {
	if _, ok := v.(bool); !ok {
		return "not a boolean"
	}
	return ""
}

// specSchemas is SPEC section 13, read independently of the JSON Schema files: where each schema may be
// used, its properties with their rules, and which are required.
var specSchemas = func() map[string]struct {
	kinds    []wire.NamespaceKind
	props    map[string]specRule
	required []string
	extra    func(doc map[string]any) string
} {
	ms := ruleInt(0, wire.MaxSafeInteger)
	identifier := ruleMatch("identifier", wire.ValidIdentifier)
	workerID := ruleMatch("worker id", wire.ValidWatchID)
	type s = struct {
		kinds    []wire.NamespaceKind
		props    map[string]specRule
		required []string
		extra    func(doc map[string]any) string
	}
	return map[string]s{
		MediaIntentV1: {
			kinds: []wire.NamespaceKind{wire.KindService, wire.KindUser},
			props: map[string]specRule{
				"role": ruleEnum("publish", "subscribe"), "desired": ruleBool, "source_id": identifier,
				"media_kind": ruleEnum("video", "audio"), "stream_id": identifier, "variant_id": identifier,
				"output_profile": identifier, "priority": ruleInt(0, 1000),
				"recording_mode": ruleEnum("inherit", "disabled", "required"),
				"parameters": func(v any) string {
					m, ok := v.(map[string]any)
					if !ok {
						return "not an object"
					}
					for k, p := range m {
						if _, ok := p.(map[string]any); !ok || !wire.ValidPrincipalID(k) {
							return "not an object of objects keyed by service ids"
						}
					}
					return ""
				},
			},
			required: []string{"role", "desired", "source_id", "media_kind"},
			extra: func(doc map[string]any) string {
				if _, ok := doc["recording_mode"]; doc["role"] == "publish" && !ok {
					return "publish without recording_mode"
				}
				return ""
			},
		},
		LeaseV1: {
			kinds:    []wire.NamespaceKind{wire.KindService},
			props:    map[string]specRule{"holder": workerID, "claimed_at_ms": ms, "renewed_at_ms": ms, "purpose": ruleString},
			required: []string{"holder", "claimed_at_ms"},
		},
		ObservedStatusV1: {
			kinds: []wire.NamespaceKind{wire.KindService, wire.KindUser},
			props: map[string]specRule{
				"subject_key": ruleMatch("key", wire.ValidKey),
				"state":       ruleEnum("pending", "active", "failed", "stopped", "invalid"), "observed_at_ms": ms,
				"message": func(v any) string {
					if s, ok := v.(string); !ok || len(s) > 256 {
						return "not a string of at most 256 bytes"
					}
					return ""
				},
				"publication_id": identifier, "subscription_id": identifier, "variant_id": identifier,
				"error_code": ruleString, "holder": workerID,
			},
			required: []string{"subject_key", "state", "observed_at_ms"},
		},
		PreferenceV1: {
			kinds: []wire.NamespaceKind{wire.KindUser, wire.KindGroup},
			props: map[string]specRule{"kind": ruleString, "preferred_group": ruleString, "layout": ruleString,
				"audio_device": ruleString},
			required: []string{"kind"},
		},
		WorkerStatusV1: {
			kinds: []wire.NamespaceKind{wire.KindSystem},
			props: map[string]specRule{
				"worker_id": workerID, "service": ruleString, "principal": ruleMatch("principal id", wire.ValidPrincipalID),
				"status": ruleEnum("starting", "ready", "draining", "stopping"), "interval_ms": ruleInt(100, 60000),
				"leases": func(v any) string {
					a, ok := v.([]any)
					if !ok {
						return "not an array"
					}
					for _, l := range a {
						if s, ok := l.(string); !ok || !wire.ValidKey(s) {
							return "not an array of keys"
						}
					}
					return ""
				},
				"first_seen_ms": ms,
			},
			required: []string{"worker_id", "service", "principal", "status", "interval_ms", "leases", "first_seen_ms"},
		},
	}
}()

// specVerdict judges doc, a JSON text, for schema id in namespace ns as SPEC section 13 words it:
// "" when it is accepted, else why not. It is exact for the documents the content guard accepts (the
// guard itself is FuzzGuard's business).
func specVerdict(id, ns string, doc []byte) string {
	sc, ok := specSchemas[id]
	if !ok {
		return "unregistered"
	}
	kind, _, ok := wire.ParseNamespace(ns)
	if !ok || !slices.Contains(sc.kinds, kind) {
		return "outside its namespaces"
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return "not JSON"
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return "not an object"
	}
	for _, r := range sc.required {
		if _, ok := obj[r]; !ok {
			return "missing " + r
		}
	}
	for name, val := range obj {
		rule, ok := sc.props[name]
		if !ok {
			return "unknown property " + name
		}
		if why := rule(val); why != "" {
			return name + ": " + why
		}
	}
	if sc.extra != nil {
		return sc.extra(obj)
	}
	return ""
}

// FuzzValidateMatchesSpec checks Registry.Validate against specVerdict for every registered schema: a
// document the content guard accepts is accepted exactly when SPEC section 13 accepts it (FuzzValidate
// covers the media intent alone, and only in the accepting direction).
func FuzzValidateMatchesSpec(f *testing.F) {
	r := newRegistry(f)
	ids := r.IDs()
	for i, id := range ids {
		ex := examples()[id]
		f.Add(uint8(i), ex.ns, mustJSON(f, ex.doc))
		for _, req := range required[id] {
			f.Add(uint8(i), ex.ns, mustJSON(f, with(ex.doc, map[string]any{req: nil})))
		}
		f.Add(uint8(i), "group/x", mustJSON(f, ex.doc))
		f.Add(uint8(i), ex.ns, mustJSON(f, with(ex.doc, map[string]any{"extra": 1})))
	}
	for _, s := range []struct {
		id  string
		ns  string
		doc string
	}{
		{MediaIntentV1, "user/a", `{"role":"publish","desired":false,"source_id":"a","media_kind":"audio","recording_mode":"disabled"}`},
		{MediaIntentV1, "user/a", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","priority":1e3,"parameters":{"a":{}}}`},
		{MediaIntentV1, "user/a", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","priority":-0.0,"stream_id":"..."}`},
		{LeaseV1, "service/a", `{"holder":"w","claimed_at_ms":9007199254740991,"renewed_at_ms":0.0e5}`},
		{LeaseV1, "service/a", `{"holder":"w","claimed_at_ms":9007199254740991.5}`},
		{ObservedStatusV1, "service/a", `{"subject_key":"a/.b","state":"invalid","observed_at_ms":1,"message":"` + strings.Repeat("é", 128) + `"}`},
		{WorkerStatusV1, "system", `{"worker_id":"w","service":"","principal":"p","status":"stopping","interval_ms":1e2,"leases":[],"first_seen_ms":0}`},
		{WorkerStatusV1, "system", `{"worker_id":"w","service":"","principal":"p","status":"stopping","interval_ms":60000.5,"leases":[],"first_seen_ms":0}`},
		{PreferenceV1, "user/a", `{"kind":""}`},
	} {
		f.Add(uint8(slices.Index(ids, s.id)), s.ns, []byte(s.doc))
	}
	f.Fuzz(func(t *testing.T, idIndex uint8, ns string, doc []byte) {
		id := ids[int(idIndex)%len(ids)]
		if Guard(doc) != nil {
			return
		}
		err := r.Validate(id, ns, doc)
		checkErr(t, err)
		why := specVerdict(id, ns, doc)
		if err == nil && why != "" {
			t.Fatalf("%s in %q accepts %q, which SPEC refuses: %s", id, ns, doc, why)
		}
		if err != nil && why == "" {
			t.Fatalf("%s in %q refuses %q, which SPEC accepts: %v", id, ns, doc, err)
		}
	})
}
