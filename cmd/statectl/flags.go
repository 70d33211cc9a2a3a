package main

import (
	"errors"
	"fmt"
	"regexp"
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

// Set reads a revision: an integer from 0 to 2^53-1.
func (o *optionalInt) Set(s string) error {
	v, err := parseRevision(s)
	if err != nil {
		return err
	}
	o.set, o.v = true, v
	return nil
}

// parseRevision reads a revision: an integer from 0 to 2^53-1 (SPEC section 4).
func parseRevision(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange), err == nil && v > wire.MaxSafeInteger:
		return 0, fmt.Errorf("%s is above 2^53-1, the largest revision", s)
	case err != nil:
		return 0, fmt.Errorf("%q is not an integer", s)
	case v < 0:
		return 0, fmt.Errorf("%s is negative", s)
	}
	return v, nil
}

// optionalString is a string flag that tells an empty value given from no flag at all: an empty
// --guard or --ttl (a script's unset variable) is refused, never taken for the flag's absence.
type optionalString struct {
	set bool
	v   string
}

func (o *optionalString) String() string {
	if o == nil {
		return ""
	}
	return o.v
}

// Set takes any value; the command checks it.
func (o *optionalString) Set(s string) error {
	o.set, o.v = true, s
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

// maxTTLMs is the largest ttl_ms the server takes (SPEC 6: it clamps anything above 24 h to 24 h).
const maxTTLMs = 1<<53 - 1

// durationSyntax matches what time.ParseDuration reads, whatever the size of the numbers.
var durationSyntax = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// parseTTL reads a lease duration: a Go duration (30s, 1m30s, 1500ms) or a number of milliseconds.
func parseTTL(s string) (int64, error) {
	outOfRange := fmt.Errorf("--ttl %q is out of range (a lease lasts at most 24h: the server clamps a longer one)", s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case err != nil && strings.HasPrefix(s, "-"), ms < 0:
			return 0, fmt.Errorf("--ttl %q is negative", s)
		case err != nil, ms > maxTTLMs:
			return 0, outOfRange
		}
		return ms, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if durationSyntax.MatchString(s) {
			if strings.HasPrefix(s, "-") {
				return 0, fmt.Errorf("--ttl %q is negative", s)
			}
			return 0, outOfRange // a duration past what time.Duration holds (2562047h)
		}
		return 0, fmt.Errorf("--ttl %q is neither a duration (30s) nor milliseconds (30000)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("--ttl %q is negative", s)
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("--ttl %q is not a whole number of milliseconds", s)
	}
	return d.Milliseconds(), nil // at most 2562047h: under maxTTLMs
}

// parseGuard reads KEY=REV.
func parseGuard(s string) (*wire.Guard, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return nil, fmt.Errorf("--guard %q is not KEY=REV", s)
	}
	rev, err := parseRevision(s[i+1:])
	if err != nil {
		return nil, fmt.Errorf("--guard %q: revision %v", s, err)
	}
	if rev < 1 {
		return nil, fmt.Errorf("--guard %q: the revision must be at least 1 (a live entry's)", s)
	}
	return &wire.Guard{Key: s[:i], Revision: rev}, nil
}
