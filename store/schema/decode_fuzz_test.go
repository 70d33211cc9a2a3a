package schema

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode checks the single-pass decoder against encoding/json: it accepts exactly the valid JSON
// texts (less duplicate names and extreme nesting) and produces the same values.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":[1,2.5e3,-0.1,true,false,null,"x\u00e9\n"]}`, `{"a":{"b":{}}}`,
		` {"a" : "b" } `, `{"a":1,"a":2}`, `01`, `{"a":1,}`, `[1,]`, `"\ud800"`, "\"\xff\"", `1e`, `-`, `{"a":"\\"}`, `tru`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decode(data)
		valid := json.Valid(data)
		if err == nil && !valid {
			t.Fatalf("decode accepted invalid JSON %q", data)
		}
		if err != nil {
			if valid && !strings.Contains(err.Error(), "duplicate property") && !strings.Contains(err.Error(), "nests deeper") {
				t.Fatalf("decode rejected valid JSON %q: %v", data, err)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(%q) = %#v, encoding/json gives %#v", data, got, want)
		}
	})
}

// TestPlainASCII8 checks the word-at-a-time test against the byte table for every byte in every
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
			want := plainByte[c] && c < 0x80
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
			want = want && plainByte[b[i]] && b[i] < 0x80
		}
		if got := plainASCII8(word(b)); got != want {
			t.Fatalf("word %q: plainASCII8 = %v, want %v", b, got, want)
		}
	}
}
