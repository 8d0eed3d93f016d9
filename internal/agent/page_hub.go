package agent

import (
	"sync"
	"time"
)

// pageHub tells the page's live streams that the records may have changed: the agent's
// discovery (the shared blocking list of the records, or the local store's listing) calls
// changed after each pass, as does the fleet runner after each listing of the fleets, and
// every stream waiting on the hub renders again. The view cache reads the hub's change
// number to know when to read the records again. The zero value is ready to use.
type pageHub struct {
	mu      sync.Mutex
	seq     uint64
	wake    chan struct{} // closed at the next change, then replaced
	done    chan struct{} // closed when the agent stops
	stopped bool
	// staleSince is when the agent's discovery last began failing to list the records
	// (zero while it lists them), staleWhy its last error: the page may be out of date even
	// though its stream works.
	staleSince time.Time
	staleWhy   string
}

// changed wakes every stream waiting on the hub.
func (h *pageHub) changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.wakeLocked()
}

func (h *pageHub) wakeLocked() {
	if h.wake != nil {
		close(h.wake)
		h.wake = nil
	}
}

// listing records the outcome of one listing of the records by the agent's discovery: a
// failure (at now) marks what the page shows as possibly out of date, the next success
// clears the mark. Streams are woken when the mark is set or cleared (not at each failed
// retry); the records themselves did not change, so the change number stays.
func (h *pageHub) listing(now time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil && h.staleSince.IsZero():
		return
	case err == nil:
		h.staleSince, h.staleWhy = time.Time{}, ""
	case h.staleSince.IsZero():
		h.staleSince, h.staleWhy = now, err.Error()
	default:
		h.staleWhy = err.Error() // still failing: no news for the streams
		return
	}
	h.wakeLocked()
}

// stale says since when and why the records cannot be listed (zero since while they can).
func (h *pageHub) stale() (since time.Time, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.staleSince, h.staleWhy
}

// stop ends every stream: the agent no longer watches the records.
func (h *pageHub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.stopped = true
		close(h.doneLocked())
	}
}

// next returns the current change number and a channel closed at the next change. A
// stream takes it before it renders, so a change during the rendering is never missed.
func (h *pageHub) next() (uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wake == nil {
		h.wake = make(chan struct{})
	}
	return h.seq, h.wake
}

// ended is closed once the agent stopped.
func (h *pageHub) ended() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doneLocked()
}

func (h *pageHub) doneLocked() chan struct{} {
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}
