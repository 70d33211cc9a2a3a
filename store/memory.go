package store

import (
	"container/heap"
	"strings"

	"github.com/google/btree"

	"github.com/keeppeek/coordination/store/wire"
)

// space is the in-memory state of one namespace: its revision, counters and an ordered index of its
// live entries. Entries are immutable once indexed; a put replaces the pointer.
type space struct {
	name     string
	settings bool // entries live in a SettingsBackend, not the database
	revision uint64
	bytes    int64
	// tree is the index, nil while the namespace holds no entry: a namespace emptied keeps its
	// revision (SPEC section 4), and memory keeps nothing else of it. A server that sees namespaces
	// come and go (a group per meeting, a service per short-lived pool) would otherwise keep, for
	// every namespace it ever served, an empty index and the nodes the index held for reuse.
	tree *btree.BTreeG[*wire.Entry]
	// workers counts, per principal's worker-status prefix (workerGroup), the entries the index holds
	// under it: the max_workers_per_principal check of a new worker reads it instead of walking the
	// principal's workers (thousands of them, in the serial committer). Only system has any.
	workers map[string]int64
}

// indexDegree is the B-tree degree of a namespace's index.
const indexDegree = 32

func lessEntry(a, b *wire.Entry) bool { return a.Key < b.Key }

func newSpace(name string) *space { return &space{name: name} }

func (sp *space) count() int {
	if sp.tree == nil {
		return 0
	}
	return sp.tree.Len()
}

func (sp *space) get(key string) *wire.Entry {
	if sp.tree == nil {
		return nil
	}
	e, _ := sp.tree.Get(&wire.Entry{Key: key})
	return e
}

// insert indexes e, replacing the entry of its key (returned, with true) if there was one. An index
// made for it takes its nodes from nodes, the store's free list, which every namespace's index shares.
func (sp *space) insert(e *wire.Entry, nodes *btree.FreeListG[*wire.Entry]) (*wire.Entry, bool) {
	if sp.tree == nil {
		sp.tree = btree.NewWithFreeListG(indexDegree, lessEntry, nodes)
	}
	return sp.tree.ReplaceOrInsert(e)
}

// remove drops key's entry from the index and returns it; the last one drops the index, its nodes
// going back to the shared free list (as many as it takes).
func (sp *space) remove(key string) (*wire.Entry, bool) {
	if sp.tree == nil {
		return nil, false
	}
	old, ok := sp.tree.Delete(&wire.Entry{Key: key})
	if ok && sp.tree.Len() == 0 {
		sp.tree.Clear(true)
		sp.tree = nil
	}
	return old, ok
}

// countWorker adds d to the count of key's worker-status prefix, if key has one.
func (sp *space) countWorker(key string, d int64) {
	g := workerGroup(sp.name, key)
	if g == "" {
		return
	}
	if sp.workers == nil {
		sp.workers = map[string]int64{}
	}
	if sp.workers[g] += d; sp.workers[g] <= 0 {
		delete(sp.workers, g)
	}
}

// workerGroup is the worker-status prefix (wire.WorkersPrefix of a principal) that key of namespace
// ns falls under, or "" when it falls under none.
func workerGroup(ns, key string) string {
	if ns != string(wire.KindSystem) {
		return ""
	}
	rest, ok := strings.CutPrefix(key, "workers/")
	if !ok {
		return ""
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return ""
	}
	return key[:len("workers/")+i+1]
}

// ascend calls fn for each entry in key order until fn returns false.
func (sp *space) ascend(fn func(*wire.Entry) bool) {
	if sp.tree != nil {
		sp.tree.Ascend(fn)
	}
}

// ascendPrefix calls fn for each entry whose key starts with prefix and is greater than after, in
// key order, until fn returns false. It touches only what it visits.
func (sp *space) ascendPrefix(prefix, after string, fn func(*wire.Entry) bool) {
	if sp.tree == nil {
		return
	}
	start := prefix
	if after >= start {
		start = after + "\x00"
	}
	sp.tree.AscendGreaterOrEqual(&wire.Entry{Key: start}, func(e *wire.Entry) bool {
		if !strings.HasPrefix(e.Key, prefix) {
			return false
		}
		return fn(e)
	})
}

// live reports whether e has not expired at nowMs (expiry is inclusive).
func live(e *wire.Entry, nowMs int64) bool { return e.ExpiresAtMs == 0 || e.ExpiresAtMs > nowMs }

// deadline is a lease deadline in the expiry heap. It is stale once the key holds another revision or
// another deadline; stale items are dropped when they reach the top.
type deadline struct {
	atMs     int64
	ns, key  string
	revision uint64
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int { return len(h) }
func (h deadlineHeap) Less(i, j int) bool {
	if h[i].atMs != h[j].atMs {
		return h[i].atMs < h[j].atMs
	}
	if h[i].ns != h[j].ns {
		return h[i].ns < h[j].ns
	}
	return h[i].key < h[j].key
}
func (h deadlineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)   { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = deadline{} // the array must not keep the namespace and key reachable
	*h = old[:n-1]
	return x
}

func (h *deadlineHeap) push(d deadline) { heap.Push(h, d) }
func (h *deadlineHeap) pop() deadline   { return heap.Pop(h).(deadline) }

// dueIn reports whether a deadline of namespace ns is due at nowMs. It visits only the due deadlines
// (and their children): below a deadline that is not due, none is.
func (h deadlineHeap) dueIn(ns string, nowMs int64) bool {
	var visit func(i int) bool
	visit = func(i int) bool {
		if i >= len(h) || h[i].atMs > nowMs {
			return false
		}
		return h[i].ns == ns || visit(2*i+1) || visit(2*i+2)
	}
	return visit(0)
}

func (h deadlineHeap) peek() (deadline, bool) {
	if len(h) == 0 {
		return deadline{}, false
	}
	return h[0], true
}
