// Package index is nomadsim's Raft index: one counter every write of the simulated cluster
// advances, and a way for blocking queries to wait for the next write.
package index

import "sync"

// Index is the cluster's write index. It is safe for concurrent use.
type Index struct {
	mu      sync.Mutex
	current uint64
	changed chan struct{}
}

// New returns an index whose first write will be start+1.
func New(start uint64) *Index {
	return &Index{current: start, changed: make(chan struct{})}
}

// Current is the index of the latest write.
func (i *Index) Current() uint64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.current
}

// Next allocates the index of a new write and wakes every waiter. Callers apply their write
// under their own lock with the returned index, then call Notify if the write becomes
// visible after Next returned (Next already notifies once).
func (i *Index) Next() uint64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.current++
	close(i.changed)
	i.changed = make(chan struct{})
	return i.current
}

// Notify wakes every waiter without advancing the index, for writes made visible after the
// call to Next that numbered them.
func (i *Index) Notify() {
	i.mu.Lock()
	defer i.mu.Unlock()
	close(i.changed)
	i.changed = make(chan struct{})
}

// Changed returns a channel closed at the next write (or Notify).
func (i *Index) Changed() <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.changed
}
