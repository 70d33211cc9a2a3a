package natstest

import (
	"net"
	"testing"
)

// A port taken between FreePort and the node's bind (by another test package, or the local end of
// an outgoing connection) failed the test ("not ready for connections within 10 s"): the first start
// now takes new ports and starts the cluster again.
func TestStartClusterTakesNewPortsWhenOneIsTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	first := true
	c := StartCluster(t, ClusterOptions{Nodes: 2, freePort: func(t testing.TB) int {
		if first {
			first = false
			return taken // node 0's client port, already listened on
		}
		return FreePort(t)
	}})
	if c.nodes[0].clientPort == taken {
		t.Fatalf("node 0 kept the taken port %d", taken)
	}
	if c.Server(0) == nil || c.Server(1) == nil {
		t.Fatal("a node is not running")
	}
}
