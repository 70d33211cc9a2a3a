package wire

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Integer returns the integer a JSON number stands for, whatever its spelling: SPEC integers are JSON
// numbers, and the store's schemas (JSON Schema's "integer": a number whose fraction is zero) accept
// 5.0, 5e0 and 1E2, which Go's decoder refuses for an integer field. A document the store took must
// decode as the store took it. A number with a fraction (however small: the value is read exactly, not
// as a float64, which would round 2^52 + 0.5 or 1 + 1e-19 to an integer), one beyond 2^53-1 in
// magnitude (not exact in JSON) and anything that is not a JSON number (a string, a boolean, an array,
// an object, null, or Go syntax such as 0x1p4, 01 or 1.) are refused.
func Integer(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	if sc := (scanner{b: raw}); !sc.num() || sc.pos != len(raw) {
		return 0, false // not a JSON number
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < -MaxSafeInteger || n > MaxSafeInteger {
			return 0, false
		}
		return n, true
	}
	// A fraction or an exponent: the value is 0.digits × 10^point, read from the text.
	neg := s[0] == '-'
	mant, expText, _ := strings.Cut(strings.TrimPrefix(s, "-"), "e")
	if len(expText) == 0 {
		mant, expText, _ = strings.Cut(mant, "E")
	}
	exp := int64(0)
	if e := strings.TrimLeft(strings.TrimLeft(expText, "+-"), "0"); len(e) > 12 {
		exp = 1e12 // beyond any position the digits can reach
	} else if e != "" {
		exp, _ = strconv.ParseInt(e, 10, 64)
	}
	if strings.HasPrefix(expText, "-") {
		exp = -exp
	}
	intPart, fracPart, _ := strings.Cut(mant, ".")
	digits := intPart + fracPart
	point := int64(len(intPart)) + exp
	lead := len(digits) - len(strings.TrimLeft(digits, "0"))
	digits, point = strings.TrimRight(digits[lead:], "0"), point-int64(lead)
	switch {
	case digits == "":
		return 0, true
	case point < int64(len(digits)):
		return 0, false // a fraction
	case point > 16:
		return 0, false // 10^16 or more, beyond 2^53
	}
	n, err := strconv.ParseInt(digits+strings.Repeat("0", int(point)-len(digits)), 10, 64)
	if err != nil || n > MaxSafeInteger {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
