package reconciler

import (
	"encoding/json"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// A Request names a key under the controller's KeyPrefix (its Cache holds nothing else), and a
// Reconcile takes a key absent from the Cache for an intent that is gone. Enqueue of a key outside
// the prefix, or of no valid key at all, must therefore not reach Reconcile: the entry of
// "leases/a" exists, but a Reconcile would read it as deleted and tear down what it stands for.
func TestEnqueueIgnoresKeysOutsideThePrefix(t *testing.T) {
	_, c := setup(t)
	if _, err := c.Put(ctxT(t), wire.PutRequest{Namespace: testNS, Key: "leases/a", Schema: wire.SchemaLease,
		Document: json.RawMessage(`{"holder":"w1","claimed_at_ms":1}`)}); err != nil {
		t.Fatal(err)
	}
	p := newProbe(t)
	ctrl := p.start(t, c, Options{})
	p.barrier(t, "start")
	for _, key := range []string{"leases/a", "intents", "", "intents//a", "intents/../a"} {
		ctrl.Enqueue(key)
	}
	if got := p.barrier(t, "after"); len(got) != 0 {
		t.Fatalf("Enqueue of keys outside %q reached Reconcile: %v", testPrefix, keysOf(got))
	}
}
