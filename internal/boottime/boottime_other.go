//go:build !linux

package boottime

import "time"

func now() time.Duration { return monotonic() }

func sinceBoot() (time.Duration, string, bool) { return 0, "", false }
