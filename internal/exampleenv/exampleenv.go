// Package exampleenv starts, for a package's runnable examples, what a worker finds already running:
// an embedded NATS server and a state server over a store on disk.
package exampleenv

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
)

// StartStateService starts an embedded NATS server on a free loopback port and a state server over a
// store in a temporary directory, answering the admin principals "coordinator" and "transcoder-a".
// It returns the NATS URL and a function that stops everything and removes the directory. An example
// has no *testing.T: what fails to start panics, which fails the example.
func StartStateService() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "example-state")
	if err != nil {
		panic(err)
	}
	ns, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	st, err := store.Open(filepath.Join(dir, "state-store.db"), store.DefaultOptions())
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	srv, err := server.New(st, nc, server.Options{Principals: []policy.Principal{
		{ID: "coordinator", Admin: true}, {ID: "transcoder-a", Admin: true}}})
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		panic(err)
	}
	return ns.ClientURL(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

// Client connects principal to the NATS server at url and returns its state store client and the
// function that closes its connection.
func Client(url, principal string) (*client.Client, func()) {
	nc, err := client.Connect(url, principal)
	if err != nil {
		panic(err)
	}
	c, err := client.New(nc, principal)
	if err != nil {
		nc.Close()
		panic(err)
	}
	return c, nc.Close
}
