package engine

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// stayedReady waits minTime (local clock: a duration, never compared with Nomad's times) while
// following the allocation with blocking queries from index. It reports true when ok held for
// the whole time (as a last read confirms), or false with the allocation that broke it and
// the index reached.
func (d *driver) stayedReady(ctx context.Context, id string, index uint64, minTime time.Duration, ok func(*restart.Alloc) bool) (bool, *restart.Alloc, uint64, error) {
	if minTime <= 0 {
		return true, nil, index, nil
	}
	timer := time.NewTimer(minTime)
	deadline := time.Now().Add(minTime)
	defer timer.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for {
		after := index
		res := watchAsync(func() (*restart.Alloc, uint64, error) {
			// Bounded by the time left: the watch is abandoned when the timer fires, and
			// Nomad holds an abandoned query's connection until its wait ends.
			return d.watchAllocFor(wctx, id, after, max(time.Until(deadline), time.Millisecond))
		})
		select {
		case <-timer.C:
			// The watch may have waited for a slot (blocking queries are bounded per
			// process) and seen nothing: confirm before saying so, from the feed where it
			// holds the allocation (as current as a read), else with a plain read.
			cancel()
			a, held := d.feed.held(id)
			if !held {
				var err error
				if a, err = d.readAlloc(ctx, id); err != nil {
					return false, nil, index, err
				}
			}
			if !ok(a) {
				return false, a, max(index, a.ModifyIndex), nil
			}
			return true, nil, index, nil
		case <-ctx.Done():
			return false, nil, index, ctx.Err()
		case r := <-res:
			if r.err == nil && r.a == nil {
				continue // the wait ended with no change; the timer decides
			}
			if r.err != nil {
				return false, nil, index, r.err // the cluster retried what passes already
			}
			index = r.index
			if !ok(r.a) {
				return false, r.a, index, nil
			}
		}
	}
}

// watchAsync runs watch in a goroutine of its own and answers on the returned channel, so
// that the caller can race it with other events. The channel holds the answer: a watch
// abandoned by its caller ends without one to read it.
func watchAsync(watch func() (*restart.Alloc, uint64, error)) <-chan allocChange {
	res := make(chan allocChange, 1)
	go func() {
		a, index, err := watch()
		res <- allocChange{a, index, err}
	}()
	return res
}
