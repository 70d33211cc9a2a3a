package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// FuzzScanJSON: scanJSON agrees with json.Valid, and "compact" means json.Compact changes nothing.
func FuzzScanJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2.5e-3,true,null,"x\u00e9\n"]}`, ` {"a" : 1} `, `{"a":1,}`, `[1,]`, `01`, `-`, `1e`,
		`"\x"`, "\"\x01\"", `{"a":"\ud800"}`, "\"\xff\"", `{"a":{"b":[{}]}}`, `tru`, `nul`, `[`, `{"a" 1}`,
		strings.Repeat(`{"a":`, 9999) + `[]` + strings.Repeat(`}`, 9999), strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		valid, compact := scanJSON(data)
		if want := json.Valid(data); valid != want {
			t.Fatalf("scanJSON(%q) valid = %v, json.Valid %v", data, valid, want)
		}
		if !valid {
			return
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			t.Fatal(err)
		}
		if compact != bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("scanJSON(%q) compact = %v, json.Compact gives %q", data, compact, buf.Bytes())
		}
	})
}

// TestPlainASCII8 checks the word-at-a-time test and PlainRun against a byte-by-byte check for every byte in every
// position, and for words of plain bytes only.
func TestPlainASCII8(t *testing.T) {
	word := func(b [8]byte) uint64 { return binary.LittleEndian.Uint64(b[:]) }
	base := [8]byte{'a', 'b', ' ', '~', '0', 'Z', '!', '#'}
	if !plainASCII8(word(base)) {
		t.Fatalf("plain word %q not plain", base)
	}
	for pos := 0; pos < 8; pos++ {
		for c := 0; c < 256; c++ {
			b := base
			b[pos] = byte(c)
			want := c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
			if got := plainASCII8(word(b)); got != want {
				t.Fatalf("byte %#x at %d: plainASCII8 = %v, want %v", c, pos, got, want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []byte{0, 0x1f, 0x20, '"', '\\', 0x7f, 0x80, 0xff, 'a', '!', '#', '[', ']', 0x21, 0x5b, 0x5d}
	for range 200000 {
		var b [8]byte
		want := true
		for i := range b {
			b[i] = pool[rng.IntN(len(pool))]
			want = want && b[i] >= 0x20 && b[i] < 0x80 && b[i] != '"' && b[i] != '\\'
		}
		if got := plainASCII8(word(b)); got != want {
			t.Fatalf("word %q: plainASCII8 = %v, want %v", b, got, want)
		}
		// PlainRun agrees with a byte-by-byte search, from every start.
		text := append(b[:], b[:]...)
		for start := range text {
			want := start
			for want < len(text) && text[want] >= 0x20 && text[want] < 0x80 && text[want] != '"' && text[want] != '\\' {
				want++
			}
			if got := PlainRun(text, start); got != want {
				t.Fatalf("PlainRun(%q, %d) = %d, want %d", text, start, got, want)
			}
		}
	}
}
