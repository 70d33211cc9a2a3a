package acceptance_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
)

// A worker command whose credentials NATS refuses ends, exit 1, once NATS has closed its
// connection for good (nats.go closes it after the same authorization error twice): nothing it does
// can reach anyone any more. The viewer kept retrying its subscription intent on the closed
// connection for ever, logging "stated not reachable".
func TestWorkerCommandsEndWhenTheirCredentialsAreRefused(t *testing.T) {
	s := startStated(t, "")
	for _, c := range workerCommands {
		t.Run(c.name, func(t *testing.T) {
			bin := e2e.Build(t, c.pkg, c.name)
			p := startCommand(t, bin, []string{"NATS_URL=" + s.URL(), "KP_USER=transcoder-a", "KP_PASSWORD=wrong"}, c.args...)
			select {
			case <-p.done:
			case <-time.After(3 * waitTimeout):
				out := p.output()
				p.stop(t, syscall.SIGKILL)
				t.Fatalf("%s still runs with refused credentials:\n%s", c.name, out)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, p.output())
			}
		})
	}
}
