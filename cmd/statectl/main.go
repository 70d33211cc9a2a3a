// Command statectl is the command line of the keeppeek state store: it reads, writes, lists and
// watches entries of a running stated over NATS, takes online backups, verifies the audit chain and
// measures the server. See `statectl help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
