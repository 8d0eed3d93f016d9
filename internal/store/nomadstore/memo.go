package nomadstore

import (
	"maps"
	"slices"
	"sync"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// allocMemo remembers how each fixed range of a record's allocations was last encoded, so
// that an update encodes again only the ranges whose allocations changed. A driver writes
// its record several times per batch and a batch touches a few ranges, so on a big job
// this is the difference between encoding 100 allocations per write and 10,000.
type allocMemo struct {
	mu     sync.Mutex
	ranges map[int]memoRange // by the range's first index
}

// memoRange is one range as last encoded: a copy of its allocations and its chunks (more
// than one when the range had to be halved to fit a variable).
type memoRange struct {
	allocs []restart.AllocProgress
	chunks []chunk
}

// lookup returns the chunks of the range starting at start when its allocations are the
// same as when they were encoded, else nil.
func (m *allocMemo) lookup(start int, allocs []restart.AllocProgress) []*chunk {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.ranges[start]
	if !ok || len(r.allocs) != len(allocs) {
		return nil
	}
	for i := range allocs {
		if !r.allocs[i].Same(&allocs[i]) {
			return nil
		}
	}
	out := make([]*chunk, len(r.chunks))
	for i := range r.chunks {
		c := r.chunks[i] // a copy: the writer names and places its chunks
		c.name, c.carried = "", false
		out[i] = &c
	}
	return out
}

// store remembers the encoding of the range starting at start.
func (m *allocMemo) store(start int, allocs []restart.AllocProgress, chunks []*chunk) {
	if m == nil {
		return
	}
	r := memoRange{allocs: make([]restart.AllocProgress, len(allocs)), chunks: make([]chunk, len(chunks))}
	for i := range allocs {
		r.allocs[i] = deepCopy(allocs[i])
	}
	for i, c := range chunks {
		r.chunks[i] = *c
		r.chunks[i].name, r.chunks[i].carried = "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ranges == nil {
		m.ranges = map[int]memoRange{}
	}
	m.ranges[start] = r
}

// deepCopy copies p with nothing shared, so that a later change made in place (to an
// observation's counters, say) is seen as a change.
func deepCopy(p restart.AllocProgress) restart.AllocProgress {
	p.Tasks = slices.Clone(p.Tasks)
	if p.Before != nil {
		b := *p.Before
		b.Restarts, b.States = maps.Clone(b.Restarts), maps.Clone(b.States)
		p.Before = &b
	}
	if p.LastSeen != nil {
		t := *p.LastSeen
		p.LastSeen = &t
	}
	return p
}

// memoFor returns the memo of the record at k, making one.
func (n *Restarts) memoFor(k string) *allocMemo {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.memos[k]
	if m == nil {
		if len(n.memos) >= maxMemos { // bound a long-running agent's memory
			clear(n.memos)
		}
		m = &allocMemo{}
		n.memos[k] = m
	}
	return m
}

// dropMemo forgets the memo of a record that ended: it will not be written again.
func (n *Restarts) dropMemo(k string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.memos, k)
}

// maxMemos bounds the records whose encoding a store remembers.
const maxMemos = 1000
