package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A supervisor (systemd, Kubernetes, docker stop) stops a process with SIGTERM, not SIGINT: a command,
// or an example that processes copy (the worker's, the lease's), whose context ends on os.Interrupt
// only is killed outright by that stop, without draining, releasing its leases (a standby then waits
// for their TTL) or saying "stopping". Every signal.NotifyContext of the repository takes SIGTERM.
func TestEveryNotifyContextTakesSIGTERM(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	calls := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "NotifyContext" {
				return true
			}
			calls++
			for _, arg := range call.Args[1:] {
				if s, ok := arg.(*ast.SelectorExpr); ok && s.Sel.Name == "SIGTERM" {
					return true
				}
			}
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: signal.NotifyContext without syscall.SIGTERM: a supervisor's stop kills the process without its graceful stop", rel)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 8 { // stated, the example commands, the simulator, the worker's and lease's examples
		t.Fatalf("found %d signal.NotifyContext calls: the walk missed the repository", calls)
	}
}
