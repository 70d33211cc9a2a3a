// Command coordinator writes intents from the command line:
//
//	coordinator publish SOURCE [--service transcoder-a] [--variant V] [--profile P] [--recording-mode disabled]
//	coordinator model SOURCE --service cv-a --variant V --model PROFILE
//	coordinator desired NAMESPACE KEY true|false
//	coordinator delete NAMESPACE KEY
//	coordinator fleet
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

func main() {
	conn := internal.ConnFlags("dev")
	service := flag.String("service", "transcoder-a", "service id of the intent's namespace service/<id>")
	variant := flag.String("variant", "browser-h264-720p", "output variant id")
	profile := flag.String("profile", "", "output profile (default: the variant id)")
	recording := flag.String("recording-mode", "disabled", "inherit, disabled or required")
	kind := flag.String("kind", "video", "media kind")
	model := flag.String("model", "", "model profile (model intents)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: coordinator [flags] publish SOURCE | model SOURCE | desired NS KEY true|false | delete NS KEY | fleet")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	nc, err := conn.Dial("coordinator")
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	c, err := client.New(nc, *conn.User)
	if err != nil {
		fail(err)
	}
	co, err := coordinator.New(c)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := "service/" + *service
	switch {
	case args[0] == "publish" && len(args) == 2:
		in := coordinator.PublishIntent(args[1], *kind, *recording)
		in.VariantID, in.OutputProfile = *variant, *profile
		if in.OutputProfile == "" {
			in.OutputProfile = *variant
		}
		printEntry(co.PutIntent(ctx, ns, "intents/"+args[1]+"-"+*kind+"-"+*variant, in))
	case args[0] == "model" && len(args) == 2 && *model != "":
		in := coordinator.SubscribeIntent(args[1], *kind)
		in.VariantID = *variant
		params, _ := json.Marshal(map[string]string{"model_profile": *model})
		in.Parameters = map[string]json.RawMessage{*service: params}
		printEntry(co.PutIntent(ctx, ns, "intents/"+args[1]+"-"+*model, in))
	case args[0] == "desired" && len(args) == 4:
		desired, err := strconv.ParseBool(args[3])
		if err != nil {
			fail(err)
		}
		printEntry(co.SetDesired(ctx, args[1], args[2], desired))
	case args[0] == "delete" && len(args) == 3:
		rev, err := co.DeleteIntent(ctx, args[1], args[2], 0)
		if err != nil {
			fail(err)
		}
		fmt.Printf("deleted %s %s at revision %d\n", args[1], args[2], rev)
	case args[0] == "fleet" && len(args) == 1:
		workers, err := co.Fleet(ctx)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%-16s %-16s %-16s %-9s %s\n", "PRINCIPAL", "WORKER", "SERVICE", "STATUS", "LEASES")
		for _, w := range workers {
			fmt.Printf("%-16s %-16s %-16s %-9s %v\n", w.Principal, w.WorkerID, w.Service, w.Status, w.Leases)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func printEntry(e wire.Entry, err error) {
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s revision %d\n", e.Namespace, e.Key, e.Revision)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "coordinator: %v\n", err)
	os.Exit(1)
}
