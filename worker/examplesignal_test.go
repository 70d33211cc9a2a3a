package worker_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// The package example is what a worker process copies, and a supervisor (systemd, Kubernetes) stops a
// process with SIGTERM, not SIGINT: an example whose context ends on os.Interrupt only teaches a
// worker that is killed outright by the supervisor's stop, without draining, releasing its leases (a
// standby waits for their TTL) or saying "stopping". Every signal.NotifyContext of the examples must
// take SIGTERM as well.
func TestExampleStopsOnSIGTERM(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "example_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "NotifyContext" {
			return true
		}
		calls++
		for _, arg := range call.Args[1:] {
			if s, ok := arg.(*ast.SelectorExpr); ok && s.Sel.Name == "SIGTERM" {
				return true
			}
		}
		t.Errorf("example_test.go: signal.NotifyContext without syscall.SIGTERM: a supervisor's stop kills the worker without a graceful stop")
		return true
	})
	if calls == 0 {
		t.Fatal("example_test.go: no signal.NotifyContext found")
	}
}
