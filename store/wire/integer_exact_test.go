package wire

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// TestIntegerIsExact: Integer refuses a number with a fraction however small, and anything that is not
// a JSON number, where a float64 parse loses the fraction (2^52 + 0.5 rounds to 2^52, 1 + 1e-19 to 1)
// or takes Go's own syntax (0x1p4, 1., 01, 1_0).
func TestIntegerIsExact(t *testing.T) {
	zeros := strings.Repeat("0", 500)
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4503599627370496.5", 0, false}, {"9007199254740990.9", 0, false}, {"1.0000000000000000001", 0, false},
		{"1000.00000000000000000000001", 0, false}, {"0.9999999999999999999", 0, false}, {"-1.0000000000000000001", 0, false},
		{"1" + zeros + "e-500", 1, true}, {"1." + zeros, 1, true}, {"1." + zeros + "1", 0, false}, {"0." + zeros + "1e501", 1, true},
		{"1e1000000", 0, false}, {"1e-1000000", 0, false}, {"0e1000000", 0, true}, {"-0e-1000000", 0, true},
		{"1.5e1", 15, true}, {"100e-2", 1, true}, {"12345e-2", 0, false}, {"-9007199254740991.0", -MaxSafeInteger, true},
		{"9007199254740991.0000000001", 0, false}, {"90071992547409910e-1", MaxSafeInteger, true}, {"9007199254740992e0", 0, false},
		{"0x10", 0, false}, {"0x1p4", 0, false}, {"-0x1p4", 0, false}, {"1.", 0, false}, {"01", 0, false}, {"-01", 0, false},
		{"1_0", 0, false}, {"0x1_0p0", 0, false}, {"1e", 0, false}, {"1e+", 0, false}, {"-", 0, false}, {"- 1", 0, false},
		{" 1", 0, false}, {"1 ", 0, false}, {"-Inf", 0, false}, {"-NaN", 0, false}, {"1.e2", 0, false}, {"1e+2", 100, true},
	} {
		got, ok := Integer([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("Integer(%.40s) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzInteger checks Integer against an exact reading of the number.
func FuzzInteger(f *testing.F) {
	for _, s := range []string{"5", "-0.0", "5e0", "1E2", "4503599627370496.5", "1.0000000000000000001", "0x1p4", "01", "1.",
		"9007199254740991", "9007199254740992", "90071992547409910e-1", "1e-1000000", "0e99", `"5"`, "null", "-", "1e+2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := Integer(raw)
		isNumber := len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) && json.Valid(raw)
		if ok && !isNumber {
			t.Fatalf("Integer(%q) = %d for what is not a JSON number", raw, got)
		}
		if !isNumber {
			return
		}
		s := string(raw)
		if i := strings.IndexAny(s, "eE"); i >= 0 {
			if e := strings.TrimLeft(s[i+1:], "+-0"); len(e) > 4 {
				return // an exact reading would be costly; TestIntegerIsExact has such numbers
			}
		}
		r, _ := new(big.Rat).SetString(s)
		want := r != nil && r.IsInt() && r.Num().IsInt64() && r.Num().Int64() >= -MaxSafeInteger && r.Num().Int64() <= MaxSafeInteger
		if ok != want || (ok && got != r.Num().Int64()) {
			t.Fatalf("Integer(%q) = %d, %v; the number is %v", raw, got, ok, r)
		}
	})
}
