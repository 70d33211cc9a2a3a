// Command stated is the keeppeek coordination plane's state server: with no flags it runs an embedded
// NATS server on 127.0.0.1:4222, the store in ./data/state-store.db and HTTP health and metrics on
// 127.0.0.1:9095. See `stated help`.
package main

import (
	"os"
	"runtime"

	"github.com/keeppeek/coordination/internal/stated"
)

func main() {
	// stated serves no heap profiles: sampling allocations would only cost CPU and resident memory.
	runtime.MemProfileRate = 0
	os.Exit(stated.Main(os.Args[1:], os.Stdout, os.Stderr))
}
