package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// A port FreePort chose can be taken by another process before stated binds it: a first start then
// takes new ports and serves on them, instead of failing the test that asked for a stated.
func TestFirstStartTakesNewPortsWhenItsPortsAreTaken(t *testing.T) {
	s := NewStated(t, Config{Principals: []Principal{{ID: "coordinator", Admin: true, Password: "pw"}}})
	oldNATS, oldHTTP := s.NATSPort, s.HTTPPort
	for _, port := range []int{oldNATS, oldHTTP} { // as another process would
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	s.Start()
	if s.NATSPort == oldNATS || s.HTTPPort == oldHTTP {
		t.Fatalf("ports %d and %d, want new ones (%d and %d are taken)", s.NATSPort, s.HTTPPort, oldNATS, oldHTTP)
	}
	resp, err := http.Get(s.HTTP() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.NATSPort))
	if err != nil {
		t.Fatalf("NATS port: %v", err)
	}
	conn.Close()
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
}

// A stated whose HTTP port another stated took first is not taken for started because the other one
// answers /healthz there: it starts again on new ports, and answers on them itself.
func TestStartIsNotFooledByAnotherStatedOnItsPort(t *testing.T) {
	a := NewStated(t, Config{})
	a.Start()
	b := NewStated(t, Config{})
	b.HTTPPort = a.HTTPPort
	b.WriteConfig(Config{})
	b.Start()
	if b.HTTPPort == a.HTTPPort || !b.running() {
		t.Fatalf("b started on a's HTTP port %d (running %v)\n%s", a.HTTPPort, b.running(), b.Logs())
	}
	if !strings.Contains(b.Logs(), fmt.Sprintf("127.0.0.1:%d", b.HTTPPort)) {
		t.Fatalf("b's log does not name its HTTP port %d\n%s", b.HTTPPort, b.Logs())
	}
}
