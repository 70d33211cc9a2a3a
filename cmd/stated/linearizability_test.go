package main_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// The register model: one key per namespace, so the entry's revision is the namespace revision and
// every committed put advances it by exactly one.
type regState struct {
	rev    uint64
	holder string
}

type regInput struct {
	key    int
	get    bool
	exp    uint64 // put: expected revision (0 = create only)
	holder string
}

type regOutput struct {
	unknown  bool   // put: the reply never came (timeout, connection lost, server killed)
	ok       bool   // put committed
	rev      uint64 // get: the entry's revision (0 = NOT_FOUND); put ok: the new revision; conflict: current
	holder   string // get: the document's holder
	conflict bool
}

var registerModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(regInput).key
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(byKey))
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{regState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		st, in, out := state.(regState), input.(regInput), output.(regOutput)
		if in.get {
			if out.rev == st.rev && (st.rev == 0 || out.holder == st.holder) {
				return []interface{}{st}
			}
			return nil
		}
		applies := st.rev == in.exp
		next := regState{rev: st.rev + 1, holder: in.holder}
		switch {
		case out.unknown:
			if applies {
				return []interface{}{st, next}
			}
			return []interface{}{st}
		case out.ok:
			if applies && out.rev == next.rev {
				return []interface{}{next}
			}
		case out.conflict:
			if !applies && out.rev == st.rev {
				return []interface{}{st}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(regInput), output.(regOutput)
		if in.get {
			return fmt.Sprintf("get(k%d) -> rev %d %s", in.key, out.rev, out.holder)
		}
		return fmt.Sprintf("cas(k%d, exp %d, %s) -> %+v", in.key, in.exp, in.holder, out)
	},
}

// TestE2ELinearizableAcrossKills: concurrent clients run CAS and get against stated while it is killed
// with SIGKILL and restarted; the recorded history must be linearizable and no acknowledged write lost.
func TestE2ELinearizableAcrossKills(t *testing.T) {
	const keys, clients = 3, 6
	s := startStated(t)
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		nc, _ := conn(t, s, "coordinator")
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			seen := make([]uint64, keys)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(keys)
				if rng.IntN(3) == 0 {
					in := regInput{key: k, get: true}
					call := now()
					r, err := linRequest(nc, wire.OpGet, fmt.Sprintf(`{"namespace":"service/lin-%d","key":"reg"}`, k))
					ret := now()
					if err != nil || (!r.OK && r.Error.Code != wire.CodeNotFound) {
						continue // a read without an answer tells nothing
					}
					out := regOutput{}
					if r.OK {
						var d struct {
							Holder string `json:"holder"`
						}
						_ = json.Unmarshal(r.Entry.Document, &d)
						out.rev, out.holder = r.Entry.Revision, d.Holder
					}
					seen[k] = out.rev
					record(porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
					continue
				}
				holder := fmt.Sprintf("c%d-%d", c, n)
				in := regInput{key: k, exp: seen[k], holder: holder}
				call := now()
				r, err := linRequest(nc, wire.OpPut, fmt.Sprintf(`{"namespace":"service/lin-%d","key":"reg","schema":"keeppeek.lease.v1","document":{"holder":%q,"claimed_at_ms":1},"expected_revision":%d}`, k, holder, seen[k]))
				ret := now()
				out := regOutput{}
				switch {
				case err != nil || (!r.OK && r.Error.Code != wire.CodeConflict):
					out.unknown, ret = true, 1<<62 // it may have committed at any time from here on
				case r.OK:
					out.ok, out.rev = true, r.Entry.Revision
					seen[k] = out.rev
				default:
					out.conflict, out.rev = true, *r.Error.CurrentRevision
					seen[k] = out.rev
				}
				record(porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
			}
		}()
	}
	for range 3 {
		waitForOps(t, &mu, &history, 150)
		s.Kill()
		s.Start()
	}
	waitForOps(t, &mu, &history, 150)
	close(stop)
	wg.Wait()
	// A final read of every key after the last restart: no acknowledged write may be missing.
	nc, _ := conn(t, s, "coordinator")
	for k := range keys {
		call := now()
		r, err := linRequest(nc, wire.OpGet, fmt.Sprintf(`{"namespace":"service/lin-%d","key":"reg"}`, k))
		if err != nil {
			t.Fatal(err)
		}
		out := regOutput{}
		if r.OK {
			var d struct {
				Holder string `json:"holder"`
			}
			_ = json.Unmarshal(r.Entry.Document, &d)
			out.rev, out.holder = r.Entry.Revision, d.Holder
		}
		history = append(history, porcupine.Operation{ClientId: clients, Input: regInput{key: k, get: true}, Call: call, Output: out, Return: now()})
	}
	puts, unknown := 0, 0
	for _, op := range history {
		if o := op.Output.(regOutput); o.ok {
			puts++
		} else if o.unknown {
			unknown++
		}
	}
	res, _ := porcupine.CheckOperationsVerbose(registerModel.ToModel(), history, 60*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations (%d committed puts, %d unknown) is not linearizable: %v", len(history), puts, unknown, res)
	}
	if puts == 0 {
		t.Fatalf("no put committed")
	}
	t.Logf("%d operations, %d committed puts, %d with unknown outcome: linearizable", len(history), puts, unknown)
}

func linRequest(nc *nats.Conn, op wire.Op, body string) (wire.Result, error) {
	msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", op), []byte(body), time.Second)
	if err != nil {
		return wire.Result{}, err
	}
	var r wire.Result
	err = json.Unmarshal(msg.Data, &r)
	return r, err
}

// waitForOps waits until n more operations were recorded.
func waitForOps(t *testing.T, mu *sync.Mutex, history *[]porcupine.Operation, n int) {
	t.Helper()
	mu.Lock()
	target := len(*history) + n
	mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(*history)
		mu.Unlock()
		if got >= target {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d operations recorded within 30 s", got, target)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter: there is no event to wait on
	}
}
