// Package worker is the process runtime of a coordination-plane worker: its identity (principal,
// worker id, service), heartbeats (SPEC section 11) that list the leases it holds, the components it
// runs (reconciler controllers, electors, anything with Start and Stop), health, and a graceful stop:
// announce draining, stop reconciling, release leases, announce stopping. The heartbeats list the
// leases the worker was told of with HoldLease (and not yet DropLease), as many as fit in a heartbeat's
// 64 KiB (the last, in key order, left out): a job that claims a lease, an Elector's OnStarted
// included, says so.
//
//	w, _ := worker.New(worker.Options{Conn: nc, Principal: "transcoder-a", WorkerID: "tx-1", Service: "transcoder-a"})
//	w.Add(controller)            // started in order, stopped in reverse
//	w.Go("elector", elector.Run) // a goroutine the worker owns
//	err := w.Run(ctx)            // until ctx ends
//
// Healthy (HealthHandler) is a liveness check; Ready is the readiness check, which also says when no
// state server answers the worker (a parted NATS route leaves its connection up and drops its
// heartbeats: its entry expires at the state server while it runs on). Collector gives both, the
// status, the leases held and the heartbeats to Prometheus.
//
// A supervisor (systemd, Kubernetes) stops a process with SIGTERM: end Run's ctx on it too
// (signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)), or the process dies without the graceful
// stop and its leases wait for their TTL.
package worker
