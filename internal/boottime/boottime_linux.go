package boottime

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// useBoot is whether CLOCK_BOOTTIME can be read (Linux 2.6.39 and later): chosen once, so that every
// reading of a process comes from the same clock.
var useBoot = func() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}()

func now() time.Duration {
	if !useBoot {
		return monotonic()
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// It was read once, so it cannot fail but for an invalid address, which ts is not.
		panic("boottime: CLOCK_BOOTTIME: " + err.Error())
	}
	return time.Duration(ts.Nano())
}

// bootID is the kernel's id of the current boot, read once ("" when it cannot be).
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

func sinceBoot() (time.Duration, string, bool) {
	id := bootID()
	if !useBoot || id == "" {
		return 0, "", false
	}
	return now(), id, true
}
