package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// runInterruptible runs statectl until it returns or a second signal comes. The first signal (Ctrl-C)
// cancels the command's context: it stops and cleans up after itself (the bench removes its keys,
// for up to two minutes against a slow server). A second one does not wait for that: statectl
// returns at once, exit 130, saying what it leaves behind; whatever the abandoned command would print
// afterwards is dropped.
func runInterruptible(sigs <-chan os.Signal, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out, errw := &gatedWriter{w: stdout}, &gatedWriter{w: stderr}
	a := &app{stdin: stdin, stdout: out, stderr: errw}
	if f, ok := stdout.(*os.File); ok {
		a.stdoutFile = f
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- a.report(a.main(ctx, args)) }()
	interrupted := false
	for {
		select {
		case code := <-done:
			return code
		case <-sigs:
			if !interrupted {
				interrupted = true
				cancel()
				continue
			}
			out.close()
			msg := "a second interrupt: stopped at once"
			if left := a.leftBehind(); left != "" {
				msg += "; " + left
			}
			errw.closeWith(fmt.Sprintf("statectl: INTERRUPTED: %s\n", msg))
			return exitInterrupted
		}
	}
}

// gatedWriter passes writes on until it is closed, then drops them: a command abandoned by a second
// interrupt prints nothing after statectl said it stopped.
type gatedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gatedWriter) Write(b []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(b), nil
	}
	return g.w.Write(b)
}

func (g *gatedWriter) close() { g.closeWith("") }

// closeWith writes last, if any, and closes g.
func (g *gatedWriter) closeWith(last string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed && last != "" {
		_, _ = io.WriteString(g.w, last)
	}
	g.closed = true
}
