package sim

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// timerQueue runs the simulation's scheduled callbacks from one goroutine, in order of due
// time (then of scheduling), each batch under one acquisition of the state lock. Thousands
// of allocations arm timers at once; one goroutine per timer contending for the lock would
// waste the machine and make the order of simultaneous events random.
type timerQueue struct {
	mu   sync.Mutex
	h    timerHeap
	seq  uint64
	wake chan struct{}
}

type timerItem struct {
	due time.Time // real time
	seq uint64
	fn  func()
}

type timerHeap []timerItem

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = timerItem{}
	*h = old[:len(old)-1]
	return it
}

func newTimerQueue() *timerQueue { return &timerQueue{wake: make(chan struct{}, 1)} }

// add schedules fn at real time due.
func (q *timerQueue) add(due time.Time, fn func()) {
	q.mu.Lock()
	q.seq++
	heap.Push(&q.h, timerItem{due: due, seq: q.seq, fn: fn})
	first := q.h[0].seq == q.seq
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// due pops every callback due at now, and returns the time of the next one (zero if none).
func (q *timerQueue) due(now time.Time, out []func()) ([]func(), time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.h) > 0 && !q.h[0].due.After(now) {
		out = append(out, heap.Pop(&q.h).(timerItem).fn)
	}
	if len(q.h) == 0 {
		return out, time.Time{}
	}
	return out, q.h[0].due
}

// RunTimers runs the simulation's timed callbacks until ctx ends, holding c.Mu while it
// calls them.
func (c *Cluster) RunTimers(ctx context.Context) {
	q := c.timers
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var batch []func()
	for {
		var next time.Time
		batch, next = q.due(time.Now(), batch[:0])
		if len(batch) > 0 {
			c.Mu.Lock()
			for i, fn := range batch {
				if !c.closed {
					fn()
				}
				batch[i] = nil
			}
			c.Mu.Unlock()
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}
