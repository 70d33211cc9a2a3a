package wire

import "testing"

func TestInteger(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"5", 5, true}, {"-5", -5, true}, {"0", 0, true}, {"5.0", 5, true}, {"5e0", 5, true}, {"1E2", 100, true},
		{"-0.0", 0, true}, {"9007199254740991", MaxSafeInteger, true}, {"9.007199254740991e15", MaxSafeInteger, true},
		{"9007199254740992", 0, false}, {"1e300", 0, false}, {"5.5", 0, false}, {"1e-1", 0, false},
		{`"5"`, 0, false}, {"true", 0, false}, {"null", 0, false}, {"[5]", 0, false}, {"{}", 0, false}, {"", 0, false},
	} {
		got, ok := Integer([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("Integer(%s) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
