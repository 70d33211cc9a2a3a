// Command coordinator writes intents from the command line:
//
//	coordinator publish SOURCE [--service transcoder-a] [--variant V] [--profile P] [--recording-mode disabled]
//	coordinator model SOURCE --service cv-a --variant V --model PROFILE
//	coordinator desired NAMESPACE KEY true|false
//	coordinator delete NAMESPACE KEY
//	coordinator fleet
//
// Flags may come before or after the command's arguments.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}

// run carries out one command and returns the exit code: 0 done, 1 failed, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn := internal.ConnFlagsOn(fs, "dev")
	service := fs.String("service", "transcoder-a", "service id of the intent's namespace service/<id>")
	variant := fs.String("variant", "browser-h264-720p", "output variant id")
	profile := fs.String("profile", "", "output profile (default: the variant id)")
	recording := fs.String("recording-mode", "disabled", "inherit, disabled or required")
	kind := fs.String("kind", "video", "media kind")
	model := fs.String("model", "", "model profile (model intents)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coordinator publish SOURCE | model SOURCE --model M | desired NS KEY true|false | delete NS KEY | fleet  [flags]")
		fs.PrintDefaults()
	}
	args, err := internal.ParseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	usage := func() int { fs.Usage(); return 2 }
	// The command's shape is checked before anything is sent.
	if len(args) == 0 {
		return usage()
	}
	var desired bool
	switch cmd := args[0]; {
	case cmd == "publish" && len(args) == 2, cmd == "model" && len(args) == 2 && *model != "",
		cmd == "delete" && len(args) == 3, cmd == "fleet" && len(args) == 1:
	case cmd == "desired" && len(args) == 4:
		// true|false is part of the command's shape: "maybe" is bad usage, not a failure.
		if desired, err = strconv.ParseBool(args[3]); err != nil {
			fmt.Fprintf(stderr, "coordinator: desired wants true or false, not %q\n", args[3])
			return usage()
		}
	default:
		return usage()
	}
	// Everything the store would refuse, and connection flags that cannot work, are bad usage too,
	// found before anything connects.
	badUsage := func(err error) int {
		fmt.Fprintf(stderr, "coordinator: %v\n", err)
		return usage()
	}
	if err := conn.Check(); err != nil {
		return badUsage(err)
	}
	ns := "service/" + *service
	var intent coordinator.MediaIntent
	var key string
	switch args[0] {
	case "publish":
		intent = coordinator.PublishIntent(args[1], *kind, *recording)
		intent.VariantID, intent.OutputProfile = *variant, *profile
		if intent.OutputProfile == "" {
			intent.OutputProfile = *variant
		}
		key = "intents/" + args[1] + "-" + *kind + "-" + *variant
	case "model":
		intent = coordinator.SubscribeIntent(args[1], *kind)
		intent.VariantID = *variant
		params, _ := json.Marshal(map[string]string{"model_profile": *model})
		intent.Parameters = map[string]json.RawMessage{*service: params}
		key = "intents/" + args[1] + "-" + *model
	case "desired", "delete":
		if !wire.ValidNamespace(args[1]) {
			return badUsage(fmt.Errorf("namespace %q is not a namespace (service/<id>, user/<id>, group/<id>)", args[1]))
		}
		if !wire.ValidKey(args[2]) {
			return badUsage(fmt.Errorf("key %q is not a key (segments of [A-Za-z0-9._-], at most %d bytes)", args[2], wire.MaxKeyLen))
		}
	}
	if key != "" {
		if err := coordinator.CheckIntent(ns, key, intent); err != nil {
			return badUsage(err)
		}
	}
	fail := func(err error) int {
		// The coordinator package's errors already say where they come from.
		fmt.Fprintf(stderr, "coordinator: %s\n", strings.TrimPrefix(err.Error(), "coordinator: "))
		return 1
	}
	printEntry := func(e wire.Entry, err error) int {
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s %s revision %d\n", e.Namespace, e.Key, e.Revision)
		return 0
	}
	nc, err := conn.Dial("coordinator")
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	c, err := client.New(nc, *conn.User)
	if err != nil {
		return fail(err)
	}
	co, err := coordinator.New(c)
	if err != nil {
		return fail(err)
	}
	switch args[0] {
	case "publish", "model":
		return printEntry(co.PutIntent(ctx, ns, key, intent))
	case "desired":
		return printEntry(co.SetDesired(ctx, args[1], args[2], desired))
	case "delete":
		rev, err := co.DeleteIntent(ctx, args[1], args[2], 0)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "deleted %s %s at revision %d\n", args[1], args[2], rev)
		return 0
	default: // fleet
		workers, err := co.Fleet(ctx)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%-16s %-16s %-16s %-9s %s\n", "PRINCIPAL", "WORKER", "SERVICE", "STATUS", "LEASES")
		for _, w := range workers {
			fmt.Fprintf(stdout, "%-16s %-16s %-16s %-9s %v\n", w.Principal, w.WorkerID, w.Service, w.Status, w.Leases)
		}
		return 0
	}
}
