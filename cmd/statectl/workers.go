package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/store/wire"
)

// fleetWorker is one worker as `workers --json` prints it: the fields of its
// keeppeek.worker-status.v1 entry, with the entry's deadline and revision.
type fleetWorker struct {
	Principal   string   `json:"principal"`
	WorkerID    string   `json:"worker_id"`
	Service     string   `json:"service"`
	Status      string   `json:"status"`
	IntervalMs  int64    `json:"interval_ms"`
	Leases      []string `json:"leases"`
	FirstSeenMs int64    `json:"first_seen_ms"`
	ExpiresAtMs int64    `json:"expires_at_ms"`
	Revision    uint64   `json:"revision"`
}

// cmdWorkers lists the live workers (system workers/), of one principal when one is named.
func (a *app) cmdWorkers(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	pos, err := a.parse(cmd, fs, args, 0, 1)
	if err != nil {
		return err
	}
	principal := ""
	if len(pos) == 1 {
		if principal = pos[0]; !wire.ValidPrincipalID(principal) {
			return usageErrorf("workers: %q is not a principal id", principal)
		}
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	co, err := coordinator.New(cn.c)
	if err != nil {
		return err
	}
	var fleet []coordinator.Worker
	if err := cn.state(ctx, func(ctx context.Context) (err error) { fleet, err = co.Fleet(ctx); return err }); err != nil {
		return err
	}
	out := []fleetWorker{}
	for _, w := range fleet {
		if principal != "" && w.Principal != principal {
			continue
		}
		leases := w.Leases
		if leases == nil {
			leases = []string{}
		}
		out = append(out, fleetWorker{Principal: w.Principal, WorkerID: w.WorkerID, Service: w.Service, Status: w.Status,
			IntervalMs: w.IntervalMs, Leases: leases, FirstSeenMs: w.FirstSeenMs, ExpiresAtMs: w.ExpiresAtMs, Revision: w.Revision})
	}
	if a.g.json {
		return writeJSON(a.stdout, struct {
			Workers []fleetWorker `json:"workers"`
		}{out})
	}
	return writeWorkerTable(a.stdout, out)
}

// writeWorkerTable prints one line per worker; LEASES is how many its heartbeats list.
func writeWorkerTable(w io.Writer, workers []fleetWorker) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tWORKER\tSERVICE\tSTATUS\tLEASES\tINTERVAL\tFIRST SEEN\tEXPIRES")
	for _, x := range workers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%s\t%s\n", x.Principal, x.WorkerID, x.Service, x.Status, len(x.Leases),
			time.Duration(x.IntervalMs)*time.Millisecond, formatTime(x.FirstSeenMs), formatTime(x.ExpiresAtMs))
	}
	return tw.Flush()
}
