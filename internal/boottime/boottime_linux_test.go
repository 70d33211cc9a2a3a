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

// SinceBoot reads the same clock as Now, with the kernel's id of this boot, which another process of
// the same boot reads too.
func TestSinceBootOnLinux(t *testing.T) {
	before := Now()
	d, id, ok := SinceBoot()
	after := Now()
	if !ok || d < before.Sub(Instant{}) || d > after.Sub(Instant{}) {
		t.Fatalf("SinceBoot = %v, %q, %v; want ok and a reading between %v and %v", d, id, ok, before.Sub(Instant{}), after.Sub(Instant{}))
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(b)); id != want || len(id) != 36 {
		t.Fatalf("boot id %q, want %q", id, want)
	}
}
