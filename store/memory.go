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
	tree     *btree.BTreeG[*wire.Entry]
}

func lessEntry(a, b *wire.Entry) bool { return a.Key < b.Key }

func newSpace(name string) *space {
	return &space{name: name, tree: btree.NewG(32, lessEntry)}
}

func (sp *space) count() int { return sp.tree.Len() }

func (sp *space) get(key string) *wire.Entry {
	e, _ := sp.tree.Get(&wire.Entry{Key: key})
	return e
}

// ascendPrefix calls fn for each entry whose key starts with prefix and is greater than after, in
// key order, until fn returns false. It touches only what it visits.
func (sp *space) ascendPrefix(prefix, after string, fn func(*wire.Entry) bool) {
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
