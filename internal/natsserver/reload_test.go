package natsserver

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// Reload on a server that has shut down answers an error; it used to read the port of a listener that
// is gone and panic.
func TestReloadAfterShutdownIsAnError(t *testing.T) {
	s, err := Start(Options{Listen: "127.0.0.1:0", Users: []User{{Name: "a", Password: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	if err := s.Reload([]User{{Name: "b", Password: "y"}}); err == nil {
		t.Fatal("a reload of a stopped server succeeded")
	}
}

// The embedded server's options by default: loopback only on the SPEC's port, 1 MiB messages, and a
// subscriber that stops reading has its messages dropped instead of stalling the publisher.
func TestDefaultOptions(t *testing.T) {
	o, err := serverOptions(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Host != "127.0.0.1" || o.Port != 4222 || o.MaxPayload != 1<<20 || !o.NoFastProducerStall || o.HTTPPort != 0 ||
		o.Cluster.Port != 0 || o.LeafNode.Port != 0 || o.Websocket.Port != 0 || o.MQTT.Port != 0 {
		t.Fatalf("options %+v", o)
	}
	if o, _ := serverOptions(Options{Listen: "127.0.0.1:0"}); o.Port != server.RANDOM_PORT {
		t.Fatalf("port 0 gives %d", o.Port)
	}
}
