package schema

import (
	"strings"
	"testing"
)

// benchIntent is a schema-valid 2,193-byte publish media intent, as in the store's qualification
// workload.
var benchIntent = func() []byte {
	head := `{"role":"publish","desired":true,"source_id":"camera-front-door","media_kind":"video",` +
		`"stream_id":"main","variant_id":"h264-720p","output_profile":"web-720p","priority":500,` +
		`"recording_mode":"required","parameters":{"transcoder-a":{"note":"`
	tail := `"}}}`
	n := 2193 - len(head) - len(tail)
	words := strings.Repeat("plain words and spaces keep the guard happy ", n/40+1)
	pad := strings.TrimRight(words[:n-1], " ")
	pad += strings.Repeat(".", n-len(pad))
	return []byte(head + pad + tail)
}()

// BenchmarkValidate measures the whole check of one put (decode, JSON Schema, guard) and its parts.
func BenchmarkValidate(b *testing.B) {
	r, err := New()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Validate(MediaIntentV1, "user/owner-001", benchIntent); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(benchIntent); err != nil {
				b.Fatal(err)
			}
		}
	})
	v, _ := decode(benchIntent)
	b.Run("jsonschema", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := r.entries[MediaIntentV1].schema.Validate(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("guard", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := guardValue(v, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
