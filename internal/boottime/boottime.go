// Package boottime is a clock for timing validity windows across a suspend of the machine.
//
// Go's monotonic clock (time.Now, time.Since) does not advance while a Linux machine is suspended: a
// process that holds something for ten seconds, is suspended for a minute and resumed, finds only the
// time it ran elapsed, and believes it holds what the rest of the system let go of long ago. On Linux,
// Now reads CLOCK_BOOTTIME, which counts the suspend; elsewhere it reads the monotonic clock, which on
// those systems either counts it too or is all there is.
package boottime

import "time"

// Instant is a reading of the clock: comparable with other Instants of the same process only, never
// with a time.Time.
type Instant struct{ d time.Duration }

// Now returns the current reading.
func Now() Instant { return Instant{now()} }

// Add returns i moved by d.
func (i Instant) Add(d time.Duration) Instant { return Instant{i.d + d} }

// Sub returns the duration i - j.
func (i Instant) Sub(j Instant) time.Duration { return i.d - j.d }

// Before reports whether i is before j.
func (i Instant) Before(j Instant) bool { return i.d < j.d }

// After reports whether i is after j.
func (i Instant) After(j Instant) bool { return i.d > j.d }

// IsZero reports whether i is the zero Instant, which no reading returns.
func (i Instant) IsZero() bool { return i.d == 0 }

// Until returns the duration from now until i (negative once i has passed).
func Until(i Instant) time.Duration { return i.Sub(Now()) }

// Since returns the duration from i until now.
func Since(i Instant) time.Duration { return Now().Sub(i) }

// Deadline returns the time.Time that is as far from time.Now as i is from Now, for a context
// deadline or a timer: it holds only if the machine is not suspended before it passes.
func Deadline(i Instant) time.Time { return time.Now().Add(Until(i)) }

// start is the monotonic reading the fallback counts from.
var start = time.Now()

// monotonic is the fallback clock: the monotonic time since the process started, plus one so that no
// reading is zero.
func monotonic() time.Duration { return time.Since(start) + 1 }

// SinceBoot returns CLOCK_BOOTTIME, the time since the machine booted (its suspends included), with
// the id of that boot: a reading another process of the same boot can compare with its own (a
// process restarted on the same machine measures how long it was gone). ok is false where either
// cannot be read (not Linux).
func SinceBoot() (d time.Duration, bootID string, ok bool) { return sinceBoot() }
