// Command statectl is the command line of the keeppeek state store: it reads, writes, lists and
// watches entries of a running stated over NATS, takes online backups, verifies the audit chain and
// measures the server. See `statectl help`.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// A closed terminal (SIGHUP) ends a command as Ctrl-C does, so that it cleans up (unwatches, removes
	// the bench's keys and a backup's temporary file) instead of being killed; under nohup, which
	// ignores SIGHUP, it runs on.
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(sigs, syscall.SIGHUP)
	}
	os.Exit(runInterruptible(sigs, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
