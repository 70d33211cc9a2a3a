package e2e

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// PID is the process id of the running stated (0 when none was started).
func (s *Stated) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// SetSoftLimit sets the soft limit of resource (unix.RLIMIT_NOFILE, unix.RLIMIT_FSIZE, ...) of the
// running stated to soft, keeping its hard limit, and returns the soft limit it had: what any user
// may do to a process of its own (prlimit(2)), so the test runs unprivileged too. soft above the hard
// limit fails the test.
func (s *Stated) SetSoftLimit(resource int, soft uint64) (old uint64) {
	s.t.Helper()
	pid := s.PID()
	if pid == 0 {
		s.t.Fatal("e2e: SetSoftLimit: stated is not running")
	}
	var cur unix.Rlimit
	if err := unix.Prlimit(pid, resource, nil, &cur); err != nil {
		s.t.Fatalf("e2e: prlimit %d of stated (pid %d): %v", resource, pid, err)
	}
	next := unix.Rlimit{Cur: soft, Max: cur.Max}
	if err := unix.Prlimit(pid, resource, &next, nil); err != nil {
		s.t.Fatalf("e2e: prlimit %d of stated (pid %d) to %d (hard %d): %v", resource, pid, soft, cur.Max, err)
	}
	return cur.Cur
}

// OpenFiles is how many file descriptors the running stated holds (read from /proc).
func (s *Stated) OpenFiles() int {
	s.t.Helper()
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(s.PID()) + "/fd")
	if err != nil {
		s.t.Fatalf("e2e: open files of stated: %v", err)
	}
	return len(entries)
}

// WaitExit waits up to timeout for stated to exit by itself (nothing is sent to it) and returns its
// exit code; ok is false when it still runs after timeout.
func (s *Stated) WaitExit(timeout time.Duration) (code int, ok bool) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exit == nil {
		return 0, true
	}
	if ee, ok := s.exit.(*exec.ExitError); ok {
		return ee.ExitCode(), true
	}
	return -1, true
}
