package store

import (
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

func TestSmokePutGetWatch(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	ctx := ctxT(t)
	sink, ch := chanSink(64)
	ws, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if ws.SnapshotRevision != 0 || len(ws.Entries) != 0 {
		t.Fatalf("snapshot %+v", ws)
	}
	e := mustPut(t, s, admin, putLease("service/tx", "leases/a"))
	if e.Revision != 1 || e.Owner != "coordinator" {
		t.Fatalf("entry %+v", e)
	}
	m := recv(t, ch)
	if m.Sequence != 1 || m.Event.Kind != wire.UpdatePut || m.Event.Revision != 1 {
		t.Fatalf("message %+v", m)
	}
	var u wire.WatchUpdate
	if err := wire.Decode(m.JSON(), &u); err != nil || u.Entry == nil || u.Entry.Key != "leases/a" {
		t.Fatalf("json %s: %v", m.JSON(), err)
	}
	s.Close()
	s2 := openAt(t, path, DefaultOptions())
	got, err := s2.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/a"})
	if err != nil || got.Revision != 1 {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	rep, err := s2.VerifyAudit()
	if err != nil || !rep.OK() || rep.Records != 1 {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// The store keeps its own copy of a document: a put decoded from a buffer the caller then reuses (a
// decoded request's document shares the buffer) leaves the stored entry, its watch update and the
// reply as they were.
func TestPutKeepsItsOwnDocument(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	buf := []byte(`{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":` + string(leaseDoc("w1")) + `}`)
	var req wire.PutRequest
	if err := wire.Decode(buf, &req); err != nil {
		t.Fatal(err)
	}
	e := mustPut(t, s, admin, req)
	want := string(leaseDoc("w1"))
	for i := range buf {
		buf[i] = 'x'
	}
	got, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, ch); string(got.Document) != want || string(e.Document) != want || string(m.Event.Entry.Document) != want {
		t.Fatalf("stored %s, answered %s, sent %s; want %s", got.Document, e.Document, m.Event.Entry.Document, want)
	}
}
