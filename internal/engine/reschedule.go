package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// reschedule stops an allocation so that the scheduler replaces it (Nomad's -reschedule), then
// follows the NextAllocation chain until the replacement runs, racing placement failures.
func (d *driver) reschedule(ctx context.Context, i int) error {
	p := d.progress(i)
	if p.State == restart.AllocPending {
		// runBatch takes the whole batch up first; this is for an allocation it did not.
		if err := d.takeUp(ctx, []int{i}); err != nil {
			return err
		}
		p = d.progress(i)
	}
	fresh := d.takeFresh(i)
	if p.State == restart.AllocRestarting {
		if err := d.sendStop(ctx, i, fresh); err != nil {
			return err
		}
		p = d.progress(i)
	} else if p.State == restart.AllocWaiting && p.Replacement == "" && d.jobType == "system" {
		// A former driver may have died between the stop and the forced evaluation that the
		// system scheduler needs; another evaluation does no harm.
		if _, err := retry(ctx, func() (struct{}, error) {
			return struct{}{}, d.e.cluster.ForceEvaluate(ctx, d.jobNS, d.jobID)
		}); err != nil {
			//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
			return &allocFailure{fmt.Errorf("Failed evaluate job: %w", err)}
		}
	}
	if p.State != restart.AllocWaiting {
		return nil
	}
	return d.followReplacement(ctx, i)
}

// sendStop sends the stop of an allocation whose intent is persisted, after checking Nomad's
// facts when the intent may be from a former attempt.
func (d *driver) sendStop(ctx context.Context, i int, fresh bool) error {
	var b backoff
	for {
		p := d.progress(i)
		if !fresh {
			a, err := d.readAlloc(ctx, p.ID)
			if errors.Is(err, cluster.ErrAllocNotFound) {
				return &allocFailure{errors.New("allocation no longer exists and its replacement is unknown")}
			}
			if err != nil {
				return &allocFailure{err}
			}
			if restart.StopTookEffect(a) {
				d.log.Info("stop request of a former attempt took effect; not sending it again", "alloc", p.ID)
				var since uint64
				if p.Before != nil {
					since = p.Before.AllocModifyIndex
				}
				if err := d.stopped(ctx, i, since); err != nil {
					return err
				}
				return d.forceEvalIfSystem(ctx)
			}
			if err := d.step(ctx, func(r *restart.Record) { r.Allocs[i].Attempts++ }); err != nil {
				return err
			}
		}
		d.log.Debug("sending stop", "alloc", p.ID, "attempt", p.Attempts, "fresh", fresh)
		index, err := d.e.cluster.StopAlloc(ctx, p.ID, d.spec.NoShutdownDelay)
		if err == nil {
			if err := d.stopped(ctx, i, index); err != nil {
				return err
			}
			return d.forceEvalIfSystem(ctx)
		}
		if !transient(err) {
			//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
			return &allocFailure{fmt.Errorf("Failed to stop allocation: %w", err)}
		}
		d.log.Warn("stop request failed; checking and retrying", "alloc", p.ID, "err", err)
		if werr := b.wait(ctx); werr != nil {
			//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
			return &allocFailure{fmt.Errorf("Failed to stop allocation: %w (gave up retrying: %v)", err, werr)}
		}
		fresh = false
	}
}

// stopped records that the stop went out. Lazily: a driver that finds the intent without it
// asks Nomad's facts whether the stop took effect.
func (d *driver) stopped(_ context.Context, i int, index uint64) error {
	d.stepLazy(func(r *restart.Record) {
		p := &r.Allocs[i]
		p.State, p.StopIndex, p.Waiting = restart.AllocWaiting, index, "a replacement allocation"
	})
	return nil
}

// forceEvalIfSystem creates the evaluation the system scheduler needs to replace a stopped
// allocation (Nomad's #19043).
func (d *driver) forceEvalIfSystem(ctx context.Context) error {
	if d.jobType != "system" {
		return nil
	}
	_, err := retry(ctx, func() (struct{}, error) {
		return struct{}{}, d.e.cluster.ForceEvaluate(ctx, d.jobNS, d.jobID)
	})
	if err != nil {
		//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
		return &allocFailure{fmt.Errorf("Failed evaluate job: %w", err)}
	}
	return nil
}

// placementError is a placement failure in Nomad's words; it is unrecoverable.
type placementError struct{ pf *cluster.PlacementFailure }

func (e *placementError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Evaluation %q has placement failures for group %q:", e.pf.EvalID, e.pf.Group)
	for _, r := range e.pf.Reasons {
		b.WriteString("\n    * " + r)
	}
	return b.String()
}

func (e *placementError) Unwrap() error { return restart.ErrPlacementFailure }

// followReplacement follows NextAllocation from the allocation (or the replacement reached so
// far) with blocking queries until a replacement is ready, while a second watch looks for
// evaluations that could not place the group.
func (d *driver) followReplacement(ctx context.Context, i int) error {
	p := d.progress(i)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	placement := d.placementFor(wctx, i)
	type result struct {
		a     *restart.Alloc
		index uint64
		err   error
	}
	finishedOK := restart.BatchLike(d.jobType)
	cur := p.ID
	var index uint64
	if p.Replacement != "" {
		cur = p.Replacement
	} else if p.Before != nil {
		// From the observation on: only what changed after it shows the stop's effect.
		index = p.Before.AllocModifyIndex
	}
	var b backoff
	var seen *restart.Alloc // an answer already read, to judge before watching again
	// The feed keeps the allocation followed current between watches.
	d.feed.pin(cur)
	defer func() { d.feed.unpin(cur) }()
	for {
		var r result
		if seen != nil {
			r, seen = result{a: seen, index: index}, nil
		} else {
			res := make(chan result, 1)
			go func() {
				a, idx, err := d.watchAlloc(wctx, cur, index)
				res <- result{a, idx, err}
			}()
			select {
			case <-placement.done:
				cancel()
				return &allocFailure{placement.err}
			case r = <-res:
			}
		}
		if r.err != nil {
			if !transient(r.err) {
				//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
				return &allocFailure{fmt.Errorf("Failed to retrieve allocation %q: %w", cur, r.err)}
			}
			if b.wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		b = backoff{}
		a := r.a
		index = r.index
		if a.NextAllocation != "" {
			from, to := a.ID, a.NextAllocation
			// Lazily: a later driver follows the NextAllocation chain from the allocation.
			d.stepLazy(func(rec *restart.Record) {
				q := &rec.Allocs[i]
				q.Replacement = to
				q.Waiting = fmt.Sprintf("allocation %q to start running", to)
				d.eventLocked(restart.Event{Type: restart.EventAllocReplaced, AllocID: q.ID, Batch: q.Batch,
					Message: fmt.Sprintf("Allocation %q replaced by %q, waiting for %q to start running", from, to, to)})
			})
			d.feed.pin(to)
			d.feed.unpin(cur)
			cur, index = to, 0
			continue
		}
		if restart.ReplacementReady(a, p.ID, d.readyMode(), finishedOK) {
			if d.gated(a) {
				d.stepLazy(func(rec *restart.Record) {
					rec.Allocs[i].Waiting = fmt.Sprintf("allocation %q to be healthy", a.ID)
				})
				if err := d.passGate(ctx, i, a, index, runningTasks(a)); err != nil {
					return err
				}
				return d.doneAlloc(ctx, i, fmt.Sprintf("Allocation %q is healthy", a.ID))
			}
			ok, broke, at, err := d.stayedReady(ctx, a.ID, index, d.spec.MinHealthyTime, func(x *restart.Alloc) bool {
				return restart.ReplacementReady(x, p.ID, d.readyMode(), finishedOK)
			})
			if err != nil {
				//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
				return &allocFailure{fmt.Errorf("Failed to retrieve allocation %q: %w", cur, err)}
			}
			if ok {
				return d.doneAlloc(ctx, i, fmt.Sprintf("Allocation %q is %q", a.ID, a.ClientStatus))
			}
			// It broke within the minimum time: judge what broke it (replaced again, or not
			// running) before watching again.
			seen, index = broke, at
		}
	}
}
