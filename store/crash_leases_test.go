package store

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// The crash test again, with short leases expiring while the child writes and a small audit retention,
// so kills land in commits that expire leases and in commits that prune the audit log. After every
// kill: every acknowledged write is there, counters agree, and the audit chain verifies with one record
// per revision of every namespace. Then two restarts check the restart purge (SPEC section 6): one at a
// frozen clock, one with that clock past every deadline, where each live lease is deleted, its bytes
// leave the counters and its namespace revision advances by exactly one per lease, each with an audit
// record.
func TestCrashKillWithLeasesAndAuditPruning(t *testing.T) {
	const cycles = 12
	const retention = 16 // a prune every auditPruneSlack records or so: several over the run
	path := filepath.Join(t.TempDir(), "state-store.db")
	models := map[string]*crashModel{}
	for _, ns := range crashNamespaces {
		models[ns] = &crashModel{keys: map[string]uint64{}}
	}
	var purged int
	for cycle := range cycles {
		crashCycle(t, cycle, path, 100+rand.IntN(201), models, crashLeasesEnv+"="+strconv.Itoa(retention))
		if t.Failed() {
			return
		}
		crashCheck(t, cycle, path, models, DefaultOptions())
		if t.Failed() {
			return
		}
		purged += crashPurgeCheck(t, cycle, path, retention)
		if t.Failed() {
			return
		}
	}
	rep := func() AuditReport {
		s := openAt(t, path, DefaultOptions())
		defer s.Close()
		rep, err := s.VerifyAudit()
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}()
	if rep.CheckpointSeq == 0 {
		t.Fatalf("the audit log was never pruned (%v): the test did not exercise pruning", rep)
	}
	t.Logf("%d cycles, %d leases purged at restarts, audit %v, checkpoint seq %d", cycles, purged, rep, rep.CheckpointSeq)
}

// crashPurgeCheck opens the store at a frozen clock, then again with the clock past every lease's
// deadline, and checks the second open's purge against the first's state. It returns the leases purged.
func crashPurgeCheck(t *testing.T, cycle int, path string, retention int) int {
	t.Helper()
	frozen := time.Now()
	opts := DefaultOptions()
	opts.AuditRetention = retention
	opts.Clock = func() time.Time { return frozen }
	s := openAt(t, path, opts)
	l, err := s.List(ctxT(t), admin, wire.ListRequest{Namespace: crashLeaseNamespace, Limit: wire.MaxListLimit})
	if err != nil {
		t.Fatalf("cycle %d: List: %v", cycle, err)
	}
	var leaseBytes int64
	for _, e := range l.Entries {
		if e.ExpiresAtMs <= frozen.UnixMilli() {
			t.Errorf("cycle %d: %s is listed past its deadline", cycle, e.Key)
		}
		leaseBytes += int64(len(e.Document))
	}
	before := s.Stats()
	repBefore, err := s.VerifyAudit()
	if err != nil || !repBefore.OK() {
		t.Fatalf("cycle %d: audit before the purge: %v %v", cycle, repBefore, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	opts.Clock = func() time.Time { return frozen.Add(MaxTTLMs * time.Millisecond) }
	s = openAt(t, path, opts)
	defer s.Close()
	after := s.Stats()
	byNS := func(st Stats) map[string]NamespaceStats {
		m := map[string]NamespaceStats{}
		for _, n := range st.PerNamespace {
			m[n.Namespace] = n
		}
		return m
	}
	b, a := byNS(before), byNS(after)
	n := len(l.Entries)
	if got, want := a[crashLeaseNamespace], (NamespaceStats{Namespace: crashLeaseNamespace, Revision: b[crashLeaseNamespace].Revision + uint64(n)}); got != want {
		t.Errorf("cycle %d: after purging %d leases: %+v, want %+v", cycle, n, got, want)
	}
	for _, ns := range crashNamespaces {
		if a[ns] != b[ns] {
			t.Errorf("cycle %d: the purge changed %s: %+v, was %+v", cycle, ns, a[ns], b[ns])
		}
	}
	if after.TotalBytes != before.TotalBytes-leaseBytes {
		t.Errorf("cycle %d: total bytes %d after the purge, want %d - %d", cycle, after.TotalBytes, before.TotalBytes, leaseBytes)
	}
	rep, err := s.VerifyAudit()
	if err != nil || !rep.OK() || rep.HeadSeq != repBefore.HeadSeq+uint64(n) {
		t.Errorf("cycle %d: audit after purging %d leases: %v %v, was %v", cycle, n, rep, err, repBefore)
	}
	var expired int
	if _, _, err := s.be.scanAudit(func(_ auditCheckpoint, r *auditRecord, _ []byte) error {
		if r != nil && r.Seq > repBefore.HeadSeq {
			if r.Op != "expire" || r.Namespace != crashLeaseNamespace {
				return fmt.Errorf("purge record %+v", *r)
			}
			expired++
		}
		return nil
	}); err != nil || expired != n {
		t.Errorf("cycle %d: %d expire records after purging %d leases: %v", cycle, expired, n, err)
	}
	return n
}
