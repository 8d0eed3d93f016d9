package sim

import "sync"

// stateLock is the lock of the simulated state. A hold of it is one atomic step of the
// cluster, like one Raft apply: events raised during the hold are published when it ends,
// once per object, so that an allocation changed several times in one step (Terminated,
// then Restarting) yields one event and one index, as Nomad's client batches its updates.
type stateLock struct {
	sync.Mutex
	// epoch counts completed holds; epoch+1 identifies the current hold.
	epoch    uint64
	onUnlock func()
}

// Unlock publishes the hold's events, then releases the lock.
func (l *stateLock) Unlock() {
	if l.onUnlock != nil {
		l.onUnlock()
	}
	l.epoch++
	l.Mutex.Unlock()
}

// hold identifies the current hold (never 0). Callers hold the lock.
func (l *stateLock) hold() uint64 { return l.epoch + 1 }
