package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// maxTakeUpReads bounds the allocation reads takeUp has in flight at once.
const maxTakeUpReads = 64

// firstSyncWait bounds how long takeUp waits for a new feed to sync: about the time of a
// batch's reads at 10,000 allocations, after which it reads.
const firstSyncWait = time.Second

// takeUp observes the allocations among idx that no driver has taken up yet (state
// pending), from the driver's feed where it is synced, else by reading them concurrently,
// and writes the intent for all of them in one step before any request goes out: each
// one's observation (what a later driver compares Nomad's facts with) and state
// restarting, or skipped where it is no longer to be touched. A batch then costs one
// write before its requests instead of one per allocation.
func (d *driver) takeUp(ctx context.Context, idx []int) error {
	var pending []int
	d.mu.Lock()
	for _, i := range idx {
		if d.rec.Allocs[i].State == restart.AllocPending {
			pending = append(pending, i)
		}
	}
	d.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	// A new driver's feed lists the job once before it answers; what the batch would read
	// is in that list.
	d.feed.awaitFirstSync(ctx, firstSyncWait)
	ids := make([]string, len(pending))
	for k, i := range pending {
		ids[k] = d.progress(i).ID
	}
	reads := d.readAllocs(ctx, ids)
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.step(ctx, func(r *restart.Record) {
		for k, i := range pending {
			a, err := reads[k].a, reads[k].err
			var why string
			if err == nil {
				why = stillEligible(a)
			}
			switch {
			case errors.Is(err, cluster.ErrAllocNotFound):
				d.skipLocked(i, "it no longer exists")
			case err != nil:
				d.failLocked(i, err)
			case why != "":
				d.skipLocked(i, why)
			case d.spec.Reschedule:
				d.stopIntentLocked(i, a)
			default:
				d.restartIntentLocked(i, a)
			}
		}
	})
}

// allocRead is an allocation read for takeUp, or why it could not be.
type allocRead struct {
	a   *restart.Alloc
	err error
}

// readAllocs reads the allocations concurrently; those the driver's feed holds as current as
// a read are taken from it without a request.
func (d *driver) readAllocs(ctx context.Context, ids []string) []allocRead {
	reads := make([]allocRead, len(ids))
	sem := make(chan struct{}, maxTakeUpReads)
	var wg sync.WaitGroup
	for k, id := range ids {
		if a, ok := d.feed.observed(id); ok {
			reads[k] = allocRead{a: a}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a, err := d.readAlloc(ctx, id)
			reads[k] = allocRead{a, err}
		}()
	}
	wg.Wait()
	return reads
}

// takeFresh reports (once) whether this driver wrote allocation i's intent itself and has
// not sent its request yet.
func (d *driver) takeFresh(i int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	fresh := d.fresh[i]
	delete(d.fresh, i)
	return fresh
}

// restartIntentLocked records the intent to restart allocation i in place, with what Nomad
// shows of its targeted tasks now.
func (d *driver) restartIntentLocked(i int, a *restart.Alloc) {
	q := &d.rec.Allocs[i]
	targets := restart.TargetTasks(a, q.Tasks, d.spec.AllTasks)
	if len(q.Tasks) > 0 {
		targets = q.Tasks // tasks known only from the job version still get their request
	}
	q.State, q.Before, q.StartTime, q.Waiting = restart.AllocRestarting, restart.Observe(a, targets), d.e.now(), "the restart request"
	q.Attempts++
	d.fresh[i] = true
	for _, msg := range restartMessages(d.spec, q) {
		d.eventLocked(restart.Event{Type: restart.EventAllocRestart, AllocID: q.ID, Batch: q.Batch, Message: msg})
	}
}

// stopIntentLocked records the intent to stop allocation i (-reschedule).
func (d *driver) stopIntentLocked(i int, a *restart.Alloc) {
	q := &d.rec.Allocs[i]
	q.State, q.StartTime, q.Waiting = restart.AllocRestarting, d.e.now(), "the stop request"
	q.Before = &restart.Observation{AllocModifyIndex: a.ModifyIndex}
	q.Attempts++
	d.fresh[i] = true
	d.eventLocked(restart.Event{Type: restart.EventAllocRestart, AllocID: q.ID, Batch: q.Batch,
		Message: fmt.Sprintf("Rescheduling allocation %q for group %q", q.ID, q.Group)})
}
