package engine

import (
	"context"
	"sync"
)

// placementWatches shares one watch for placement failures per group among the allocations
// of a batch: each watch is a blocking query on the job's evaluations, whose answer grows
// with the job, so one per allocation would multiply Nomad's work by the batch size.
type placementWatches struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	m      map[string]*placementWatch
}

// placementWatch is one group's watch; done is closed when it found a failure (err).
type placementWatch struct {
	done chan struct{}
	err  error
}

func newPlacementWatches(ctx context.Context) *placementWatches {
	ctx, cancel := context.WithCancel(ctx)
	return &placementWatches{ctx: ctx, cancel: cancel, m: map[string]*placementWatch{}}
}

// placementFor returns the batch's watch for the allocation's group, starting it if needed.
// It watches from the lowest index any allocation of the group in the batch was stopped at
// (or, for one not stopped yet, read at): evaluations caused by the batch's stops are all
// created at or after it.
func (d *driver) placementFor(ctx context.Context, i int) *placementWatch {
	d.mu.Lock()
	pw := d.placements
	p := d.rec.Allocs[i]
	var since uint64
	for _, a := range d.rec.Allocs {
		if a.Batch != p.Batch || a.Group != p.Group {
			continue
		}
		idx := a.StopIndex
		if a.Before != nil && (idx == 0 || a.Before.AllocModifyIndex < idx) {
			idx = a.Before.AllocModifyIndex
		}
		if idx > 0 && (since == 0 || idx < since) {
			since = idx
		}
	}
	d.mu.Unlock()
	if pw == nil { // not inside a batch run: a private watch for this allocation
		pw = newPlacementWatches(ctx)
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if w, ok := pw.m[p.Group]; ok {
		return w
	}
	w := &placementWatch{done: make(chan struct{})}
	pw.m[p.Group] = w
	go func() {
		pf, err := d.e.cluster.WatchPlacementFailure(pw.ctx, d.jobNS, d.jobID, p.Group, since)
		switch {
		case pf != nil:
			w.err = &placementError{pf}
			close(w.done)
		case err != nil && pw.ctx.Err() == nil:
			d.log.Warn("watching placement failures", "group", p.Group, "err", err)
		}
	}()
	return w
}

// startPlacements opens the batch's shared watches (with -reschedule); the returned function
// ends them.
func (d *driver) startPlacements(ctx context.Context) func() {
	if !d.spec.Reschedule {
		return func() {}
	}
	pw := newPlacementWatches(ctx)
	d.mu.Lock()
	d.placements = pw
	d.mu.Unlock()
	return func() {
		pw.cancel()
		d.mu.Lock()
		d.placements = nil
		d.mu.Unlock()
	}
}
