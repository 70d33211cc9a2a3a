package reconciler

import (
	"strings"
	"testing"
)

// A nil Func is a Reconciler that panics in every Reconcile; the controller would recover each panic
// as a failure and retry the key with backoff for ever, reconciling nothing. New refuses it, as it
// refuses a nil Reconciler.
func TestNewRefusesANilFunc(t *testing.T) {
	_, c := setup(t)
	ctrl, err := New(c, Func(nil), Options{Namespace: testNS})
	if err == nil {
		ctrl.Stop()
		t.Fatal("New accepted a nil Func")
	}
	if !strings.Contains(err.Error(), "nil Reconciler") {
		t.Fatalf("New(nil Func) = %v, want an error naming the nil Reconciler", err)
	}
}
