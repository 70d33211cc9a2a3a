// Package e2e runs the real stated binary for end-to-end tests: it builds the binary once per test
// process, writes a configuration with free loopback ports into a temporary directory, starts the
// process, waits until it is ready, and stops it (SIGTERM, SIGKILL) on demand and at cleanup.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/natstest"
	"go.uber.org/goleak"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	buildMu   sync.Mutex // one build at a time: parallel tests may ask for the same binary
)

// Binary builds cmd/<name> of this module once per test process and returns its path. Call
// Cleanup from TestMain to remove the build directory.
func Binary(t testing.TB, name string) string {
	t.Helper()
	return Build(t, "./cmd/"+name, name)
}

// Build builds the package at pkg (a path relative to the module root, "./examples/demo") once per
// test process as name and returns the binary's path.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "keeppeek-e2e-")
	})
	if buildErr != nil {
		t.Fatalf("e2e: %v", buildErr)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(buildDir, name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2e: build %s: %v\n%s", name, err, b)
	}
	return out
}

// Cleanup removes the binaries Binary built.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return natstest.FreePort(t)
}

// Stated is a stated process and its configuration.
type Stated struct {
	t          testing.TB
	Dir        string // temporary directory: config file and data
	ConfigPath string
	NATSPort   int
	HTTPPort   int
	bin        string
	natsURL    string // external NATS server, "" for the embedded one

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exit   error
	logBuf *strings.Builder
	served bool // it was healthy once: its ports are known to clients and must not change
}

// Principal is one [[principals]] entry.
type Principal struct {
	ID       string
	Admin    bool
	Password string // plain text or a bcrypt hash
	Nkey     string // a user public key instead of a password
	Media    bool
}

// Config is what the test controls of stated's configuration; the rest is written for it.
type Config struct {
	Principals []Principal
	// Extra is appended verbatim to the configuration file (for [bounds] or settings sections).
	Extra string
	// NATSURL, when set, makes stated use this external NATS server instead of an embedded one.
	NATSURL string
	// WatchSweepMs, when set, is [nats] watch_sweep_ms.
	WatchSweepMs int64
	// NATSExtra is added verbatim to the [nats] table (tls_ca = "...", say).
	NATSExtra string
}

// NewStated prepares a stated in a fresh directory with free ports; Start runs it.
func NewStated(t testing.TB, c Config) *Stated {
	t.Helper()
	dir := t.TempDir()
	s := &Stated{t: t, Dir: dir, ConfigPath: filepath.Join(dir, "stated.toml"), NATSPort: FreePort(t), HTTPPort: FreePort(t),
		bin: Binary(t, "stated")}
	s.WriteConfig(c)
	t.Cleanup(func() { s.Kill() })
	return s
}

// WriteConfig rewrites the configuration file (then Reload applies the principals).
func (s *Stated) WriteConfig(c Config) {
	var b strings.Builder
	s.natsURL = c.NATSURL
	nats := fmt.Sprintf("listen = \"127.0.0.1:%d\"", s.NATSPort)
	if c.NATSURL != "" {
		nats = fmt.Sprintf("url = %q", c.NATSURL)
	}
	if c.WatchSweepMs != 0 {
		nats += fmt.Sprintf("\nwatch_sweep_ms = %d", c.WatchSweepMs)
	}
	if c.NATSExtra != "" {
		nats += "\n" + strings.TrimSuffix(c.NATSExtra, "\n")
	}
	fmt.Fprintf(&b, "data_dir = %q\nhttp_listen = \"127.0.0.1:%d\"\n\n[nats]\n%s\n\n", filepath.Join(s.Dir, "data"), s.HTTPPort, nats)
	for _, p := range c.Principals {
		cred := fmt.Sprintf("password = %q", p.Password)
		if p.Nkey != "" {
			cred = fmt.Sprintf("nkey = %q", p.Nkey)
		}
		fmt.Fprintf(&b, "[[principals]]\nid = %q\nadmin = %v\n%s\nmedia = %v\n\n", p.ID, p.Admin, cred, p.Media)
	}
	b.WriteString(c.Extra)
	if err := os.WriteFile(s.ConfigPath, []byte(b.String()), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// URL is the NATS URL.
func (s *Stated) URL() string {
	if s.natsURL != "" {
		return s.natsURL
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", s.NATSPort)
}

// HTTP is the base URL of the HTTP endpoints.
func (s *Stated) HTTP() string { return fmt.Sprintf("http://127.0.0.1:%d", s.HTTPPort) }

// DatabasePath is the store file.
func (s *Stated) DatabasePath() string { return filepath.Join(s.Dir, "data", "state-store.db") }

// Start runs stated and waits until its /healthz answers.
//
// The ports FreePort chose were free a moment before stated binds them, and another process (a
// test package running beside this one) can take one meanwhile. A first start that fails on a port
// in use therefore takes new free ports, rewrites them into the configuration file, and starts
// again, a few times at most. A restart keeps its ports: its clients reconnect to them.
func (s *Stated) Start() {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		err := s.start()
		if err == nil {
			s.mu.Lock()
			s.served = true
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		served := s.served
		s.mu.Unlock()
		if served || attempt == 3 || !errors.Is(err, errExited) || !strings.Contains(s.Logs(), "address already in use") {
			s.t.Fatalf("e2e: %v\n%s", err, s.Logs())
		}
		s.t.Logf("e2e: a port of stated was taken before it could bind it; new ports\n%s", s.Logs())
		s.newPorts()
	}
}

// newPorts replaces the NATS and HTTP ports in the configuration file with new free ones.
func (s *Stated) newPorts() {
	s.t.Helper()
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		s.t.Fatal(err)
	}
	natsPort, httpPort := FreePort(s.t), FreePort(s.t)
	conf := string(raw)
	if s.natsURL == "" {
		conf = strings.Replace(conf, fmt.Sprintf("listen = \"127.0.0.1:%d\"", s.NATSPort), fmt.Sprintf("listen = \"127.0.0.1:%d\"", natsPort), 1)
		s.NATSPort = natsPort
	}
	conf = strings.Replace(conf, fmt.Sprintf("http_listen = \"127.0.0.1:%d\"", s.HTTPPort), fmt.Sprintf("http_listen = \"127.0.0.1:%d\"", httpPort), 1)
	s.HTTPPort = httpPort
	if err := os.WriteFile(s.ConfigPath, []byte(conf), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// startTimeout bounds how long start waits for stated to be healthy.
const startTimeout = time.Minute

// errExited is start's error when stated exited before it was healthy.
var errExited = errors.New("stated exited at start")

// start runs stated once and waits until its /healthz answers; an error says why it did not.
func (s *Stated) start() error {
	s.mu.Lock()
	s.logBuf = &strings.Builder{}
	cmd := exec.Command(s.bin, "--config", s.ConfigPath)
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start stated: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	logs := s.logBuf
	s.mu.Unlock()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
		}
	}()
	go func() {
		<-copied
		err := cmd.Wait()
		s.mu.Lock()
		s.exit = err
		s.mu.Unlock()
		close(s.done)
	}()
	// A bound, not a speed: a start takes well under a second, but a CI machine running every test
	// package at once has been seen to take 15 s.
	deadline := time.Now().Add(startTimeout)
	// A port another process holds may accept the connection and never answer, or answer as another
	// stated that took the same port: only this process's own "stated ready" line (logged once it has
	// bound every address) says that the answer is its.
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(s.HTTP() + "/healthz")
		if err == nil {
			resp.Body.Close()
			s.mu.Lock()
			ready := strings.Contains(logs.String(), "stated ready")
			s.mu.Unlock()
			if resp.StatusCode == 200 && ready {
				return nil
			}
		}
		select {
		case <-s.done:
			s.mu.Lock()
			defer s.mu.Unlock()
			return fmt.Errorf("%w: %v", errExited, s.exit)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stated not healthy within %v", startTimeout)
		}
	}
}

// running reports whether the stated Start ran has not exited.
func (s *Stated) running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// OfflineBackup stops stated (SIGTERM; it must exit 0), copies its database aside and starts it
// again; it returns the copy's path, a backup to Restore.
func (s *Stated) OfflineBackup() string {
	s.t.Helper()
	if code := s.Term(); code != 0 {
		s.t.Fatalf("e2e: stated exited %d\n%s", code, s.Logs())
	}
	data, err := os.ReadFile(s.DatabasePath())
	if err != nil {
		s.t.Fatal(err)
	}
	backup := filepath.Join(s.t.TempDir(), "backup.db")
	if err := os.WriteFile(backup, data, 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.Start()
	return backup
}

// Restore restores backup with `stated restore` (a new epoch) and starts stated again. A stated still
// running is stopped first (SIGTERM; it must exit 0); one killed or stopped already is restored as it is.
func (s *Stated) Restore(backup string) {
	s.t.Helper()
	if s.running() {
		if code := s.Term(); code != 0 {
			s.t.Fatalf("e2e: stated exited %d\n%s", code, s.Logs())
		}
	}
	if out, err := exec.Command(s.bin, "restore", "--config", s.ConfigPath, backup).CombinedOutput(); err != nil {
		s.t.Fatalf("e2e: stated restore: %v\n%s", err, out)
	}
	s.Start()
}

// Logs returns what stated wrote to stderr so far.
func (s *Stated) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logBuf == nil {
		return ""
	}
	return s.logBuf.String()
}

func (s *Stated) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Reload sends SIGHUP.
func (s *Stated) Reload() { s.signal(syscall.SIGHUP) }

// Pause stops stated without ending it (SIGSTOP), as a machine that hangs: it answers nothing until
// Resume, which the test's cleanup also does.
func (s *Stated) Pause() {
	s.t.Cleanup(s.Resume)
	s.signal(syscall.SIGSTOP)
}

// Resume lets a paused stated run again (SIGCONT).
func (s *Stated) Resume() { s.signal(syscall.SIGCONT) }

// Term sends SIGTERM and waits for the exit; it returns the exit code.
func (s *Stated) Term() int {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	return s.wait()
}

// Kill sends SIGKILL and waits for the exit.
func (s *Stated) Kill() {
	s.signal(syscall.SIGKILL)
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (s *Stated) wait() int {
	s.t.Helper()
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
		s.Kill()
		s.t.Fatalf("e2e: stated did not exit within 20 s\n%s", s.Logs())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exit == nil {
		return 0
	}
	if ee, ok := s.exit.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Main is the TestMain of a package that uses Binary or Build: it runs the tests, removes the built
// binaries, checks for leaked goroutines (goleak) when the tests passed, and exits.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// WantUsageError runs bin with args, env added to its environment, and fails the test unless it
// exits 2 within 10 s with its usage ("Usage of") and a message naming want: a command's refusal of
// flags that cannot work, before it connects to anything.
func WantUsageError(t testing.TB, bin string, env, args []string, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	timedOut := ctx.Err() != nil
	var ee *exec.ExitError
	if timedOut || !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), want) || !strings.Contains(string(out), "Usage of") {
		t.Errorf("%s %v %v: %v (timed out: %v), want exit 2 naming %s, with the usage:\n%s", filepath.Base(bin), env, args, err, timedOut, want, out)
	}
}
