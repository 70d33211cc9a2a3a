package schema

import (
	"math/big"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestExtremeNumbers: integers of the schemas (SPEC: JSON numbers from 0 to 2^53-1, priority 0 to 1000)
// are judged by their value, however they are spelled: an exponent, trailing zeros, a long fraction,
// a magnitude far beyond any float.
func TestExtremeNumbers(t *testing.T) {
	r := newRegistry(t)
	zeros := func(n int) string { return strings.Repeat("0", n) }
	for _, c := range []struct {
		n  string
		ok bool
	}{
		{"0", true}, {"-0", true}, {"0e1000000", true}, {"-0.0e-999999", true}, {"0." + zeros(2000), true},
		{"9007199254740991", true}, {"9007199254740991e0", true}, {"90071992547409910e-1", true},
		{"9.007199254740991e15", true}, {"9007199254740991." + zeros(2000), true}, {"9007199254740991" + zeros(1000) + "e-1000", true},
		{"1" + zeros(1000) + "e-1000", true}, {"0.000" + zeros(1000) + "1e1004", true},
		{"9007199254740992e0", false}, {"9007199254740991.5", false}, {"9007199254740991." + zeros(2000) + "1", false},
		{"1e1000000", false}, {"-1e1000000", false}, {"1.5e1000000", false}, {"1e999999999999999999999", false},
		{"1e-1000000", false}, {"-1e-1000000", false}, {"5e-999999999999", false}, {"0." + zeros(2000) + "1", false},
		{"1" + zeros(2000), false}, {"-1" + zeros(2000), false}, {"1" + zeros(2000) + ".5", false},
		{"1." + zeros(2000) + "1e1000", false}, {"-1e-400", false}, {"1e401", false}, {"1e-401", false},
	} {
		err := r.Validate(LeaseV1, "service/x", []byte(`{"holder":"w","claimed_at_ms":`+c.n+`}`))
		name := c.n
		if len(name) > 40 {
			name = name[:20] + "..." + name[len(name)-17:]
		}
		if c.ok && err != nil {
			t.Errorf("claimed_at_ms %s: %v", name, err)
		}
		if !c.ok {
			if err == nil {
				t.Errorf("claimed_at_ms %s: accepted", name)
			} else {
				wantInvalid(t, err, "/claimed_at_ms")
			}
		}
	}
	for _, c := range []struct {
		n  string
		ok bool
	}{
		{"1e3", true}, {"1.000e3", true}, {"10000e-1", true}, {"1000." + zeros(1000), true}, {"999." + zeros(1000), true},
		{"0.0e500", true}, {"1000" + zeros(500) + "e-500", true},
		{"1.0001e3", false}, {"1000." + zeros(1000) + "1", false}, {"999." + strings.Repeat("9", 1000), false},
		{"-0." + zeros(1000) + "1", false}, {"1e1000000", false}, {"-1e1000000", false}, {"1e-1000000", false},
	} {
		err := r.Validate(MediaIntentV1, "user/alice",
			[]byte(`{"role":"subscribe","desired":true,"source_id":"a","media_kind":"audio","priority":`+c.n+`}`))
		if c.ok != (err == nil) {
			t.Errorf("priority %.40s: %v", c.n, err)
		}
	}
}

// TestExtremeNumbersCostLittle: a put of a few dozen bytes whose integers are 1e1000000 once made the
// schema check build exact rationals of a million digits (and print them for the message): megabytes
// and a third of a second of CPU per request, a thousand requests at once.
func TestExtremeNumbersCostLittle(t *testing.T) {
	r := newRegistry(t)
	docs := []string{
		`{"holder":"w","claimed_at_ms":1e1000000,"renewed_at_ms":-1e-1000000}`,
		`{"holder":"w","claimed_at_ms":1.5e999999,"renewed_at_ms":9e999999}`,
	}
	for _, doc := range docs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := r.Validate(LeaseV1, "service/x", []byte(doc))
		runtime.ReadMemStats(&after)
		wantInvalid(t, err, "/claimed_at_ms", "greater than the maximum 9007199254740991")
		if n := after.TotalAlloc - before.TotalAlloc; n > 256<<10 {
			t.Errorf("%s: validation allocated %d bytes", doc, n)
		}
		if strings.Contains(err.Error(), "0000000000000000000000000") {
			t.Errorf("message quotes a stand-in of hundreds of digits: %.200s", err)
		}
	}
}

// FuzzStandIn checks standIn against exact rationals: the stand-in of a number has its sign, its
// integer-ness and its order against every bound a schema could hold.
func FuzzStandIn(f *testing.F) {
	f.Add(false, "1", "", int16(401))
	f.Add(true, "1", "5", int16(-401))
	f.Add(false, "0", "", int16(30000))
	f.Add(false, "9007199254740991", strings.Repeat("0", 500), int16(0))
	f.Add(false, "1000", strings.Repeat("0", 500)+"1", int16(0))
	f.Add(true, "0", strings.Repeat("0", 399)+"1", int16(-2))
	f.Add(false, "999", strings.Repeat("9", 450), int16(0))
	f.Add(false, "1"+strings.Repeat("0", 450), "", int16(-450))
	f.Add(false, "12", "34", int16(-1000))
	bounds := []string{"0", "1", "-1", "100", "1000", "60000", "9007199254740991", "9007199254740992", "-9007199254740991",
		"1" + strings.Repeat("0", 399), "-1" + strings.Repeat("0", 399)}
	f.Fuzz(func(t *testing.T, neg bool, intDigits, fracDigits string, exp int16) {
		keep := func(s string) string {
			return strings.Map(func(r rune) rune {
				if r >= '0' && r <= '9' {
					return r
				}
				return -1
			}, s)
		}
		intDigits, fracDigits = strings.TrimLeft(keep(intDigits), "0"), keep(fracDigits)
		if intDigits == "" {
			intDigits = "0"
		}
		num := intDigits
		if neg {
			num = "-" + num
		}
		if fracDigits != "" {
			num += "." + fracDigits
		}
		if exp != 0 {
			num += "e" + strconv.Itoa(int(exp))
		}
		if _, err := decode([]byte(num)); err != nil {
			t.Fatalf("built an invalid number %q: %v", num, err)
		}
		s, ok := standIn(num)
		if !ok {
			if len(num) > numberDigits || exp > numberDigits || exp < -numberDigits {
				t.Fatalf("%q has no stand-in", num)
			}
			return
		}
		if len(s) > 2*numberDigits+8 {
			t.Fatalf("stand-in of %q has %d bytes", num, len(s))
		}
		exact, ok1 := new(big.Rat).SetString(num)
		stand, ok2 := new(big.Rat).SetString(s)
		if !ok1 || !ok2 {
			t.Fatalf("%q -> %q: not numbers", num, s)
		}
		if exact.Sign() != stand.Sign() || exact.IsInt() != stand.IsInt() {
			t.Fatalf("%q -> %q: sign or integer-ness differs", num, s)
		}
		for _, b := range bounds {
			br, _ := new(big.Rat).SetString(b)
			if exact.Cmp(br) != stand.Cmp(br) {
				t.Fatalf("%q -> %q: compares differently with %s", num, s, b)
			}
		}
		if exact.IsInt() && exact.Num().BitLen() < 1000 && exact.Cmp(stand) != 0 {
			t.Fatalf("%q -> %q: an integer within range is not kept exact", num, s)
		}
	})
}
