package wire

import (
	"encoding/json"
	"math"
	"strconv"
)

// Integer returns the integer a JSON number stands for, whatever its spelling: SPEC integers are JSON
// numbers, and the store's schemas (JSON Schema's "integer": a number whose fraction is zero) accept
// 5.0, 5e0 and 1E2, which Go's decoder refuses for an integer field. A document the store took must
// decode as the store took it. A number with a fraction, one beyond 2^53 (not exact in JSON) and
// anything that is not a number (a string, a boolean, an array, an object, null) are refused.
func Integer(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < -MaxSafeInteger || n > MaxSafeInteger {
			return 0, false
		}
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > MaxSafeInteger {
		return 0, false
	}
	return int64(f), true
}
