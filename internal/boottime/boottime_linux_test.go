package boottime

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// On Linux the clock is CLOCK_BOOTTIME, the time since boot counting suspends, which /proc/uptime
// shows too: a monotonic clock of the process (the fallback) would read near zero instead.
func TestNowIsTheTimeSinceBootOnLinux(t *testing.T) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	uptime := time.Duration(up * float64(time.Second))
	if got := Now().Sub(Instant{}); got < uptime-time.Second || got > uptime+time.Second {
		t.Fatalf("the clock reads %v since boot; /proc/uptime says %v", got, uptime)
	}
}
