package reconciler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
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

// A second Start of a controller that runs, or whose first Start failed, answered ErrStopped
// ("controller stopped"): a reader looked for a Stop that never happened. It answers
// ErrAlreadyStarted, which is not ErrStopped; a Start after Stop still answers ErrStopped.
func TestSecondStartSaysAlreadyStarted(t *testing.T) {
	env, c := setup(t)
	p := newProbe(t)
	ctrl := p.start(t, c, Options{})
	err := ctrl.Start(ctxT(t))
	if !errors.Is(err, ErrAlreadyStarted) || errors.Is(err, ErrStopped) || strings.Contains(err.Error(), "stopped") {
		t.Fatalf("second Start of a running controller = %v, want ErrAlreadyStarted", err)
	}
	ctrl.Stop()
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}

	// A first Start that failed (no read permission) leaves the controller started, not stopped.
	alice, err := client.New(env.Connect(t, "alice"), "alice")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := New(alice, p, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	defer denied.Stop()
	if err := denied.Start(ctxT(t)); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("Start without read permission = %v, want PERMISSION_DENIED", err)
	}
	if err := denied.Start(ctxT(t)); !errors.Is(err, ErrAlreadyStarted) || errors.Is(err, ErrStopped) {
		t.Fatalf("Start after a failed Start = %v, want ErrAlreadyStarted", err)
	}
}

// InvalidStatus with a nil error (a caller that reports an intent invalid for a reason of its own,
// with no error value at hand) panicked with a nil pointer dereference inside the helper. It is the
// invalid status with no message, which the observed-status schema takes.
func TestInvalidStatusOfANilError(t *testing.T) {
	var st ObservedStatus
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("InvalidStatus(nil error) panicked: %v", r)
			}
		}()
		st = InvalidStatus("intents/a", nil, time.UnixMilli(1764451200000))
	}()
	if st.State != StateInvalid || st.Message != "" || st.SubjectKey != "intents/a" || st.ObservedAtMs != 1764451200000 {
		t.Fatalf("InvalidStatus(nil error) = %+v, want state invalid without a message", st)
	}
}
