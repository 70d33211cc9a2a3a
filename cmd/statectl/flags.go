package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// optionalInt is an integer flag that knows whether it was given.
type optionalInt struct {
	set bool
	v   int64
}

func (o *optionalInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optionalInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	o.set, o.v = true, v
	return nil
}

// ptr returns a pointer to the value, or nil when the flag was not given.
func (o *optionalInt) ptr() *int64 {
	if !o.set {
		return nil
	}
	v := o.v
	return &v
}

// parseTTL reads a lease duration: a Go duration (30s, 1m30s, 1500ms) or a number of milliseconds.
func parseTTL(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("--ttl %q is negative", s)
		}
		return ms, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--ttl %q is neither a duration (30s) nor milliseconds (30000)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("--ttl %q is negative", s)
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("--ttl %q is not a whole number of milliseconds", s)
	}
	return d.Milliseconds(), nil
}

// parseGuard reads KEY=REV.
func parseGuard(s string) (*wire.Guard, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return nil, fmt.Errorf("--guard %q is not KEY=REV", s)
	}
	rev, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("--guard %q: revision %q is not an integer", s, s[i+1:])
	}
	return &wire.Guard{Key: s[:i], Revision: rev}, nil
}
