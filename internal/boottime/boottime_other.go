//go:build !linux

package boottime

import "time"

func now() time.Duration { return monotonic() }
