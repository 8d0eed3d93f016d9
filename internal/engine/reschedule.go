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
	p, sent, err := d.sendRequest(ctx, i, d.stopRequest())
	if err != nil {
		return err
	}
	if !sent && p.State == restart.AllocWaiting && p.Replacement == "" && d.jobType == "system" {
		// A former driver may have died between the stop and the forced evaluation that the
		// system scheduler needs; another evaluation does no harm.
		if err := d.forceEvaluate(ctx); err != nil {
			return err
		}
	}
	if p.State != restart.AllocWaiting {
		return nil
	}
	return d.followReplacement(ctx, i)
}

// stopRequest is the stop of an allocation, as resend sends it (Nomad's -reschedule): a
// former attempt took effect when Nomad shows the allocation stopping or stopped.
func (d *driver) stopRequest() allocRequest {
	return allocRequest{
		name: "stop",
		fail: stopFailed,
		former: func(ctx context.Context, i int, p restart.AllocProgress) (bool, error) {
			a, err := d.readAlloc(ctx, p.ID)
			switch {
			case errors.Is(err, cluster.ErrAllocNotFound):
				return true, &allocFailure{errors.New("allocation no longer exists and its replacement is unknown")}
			case err != nil:
				return true, &allocFailure{err}
			case !restart.StopTookEffect(a):
				return false, nil
			}
			d.log.Info("stop request of a former attempt took effect; not sending it again", "alloc", p.ID)
			var since uint64
			if p.Before != nil {
				since = p.Before.AllocModifyIndex
			}
			return true, d.stoppedAt(ctx, i, since)
		},
		send: func(ctx context.Context, i int, p restart.AllocProgress, fresh bool, drain *allocDrain) (bool, error) {
			d.log.Debug("sending stop", "alloc", p.ID, "attempt", p.Attempts, "fresh", fresh)
			index, err := d.e.cluster.StopAlloc(ctx, p.ID, d.spec.NoShutdownDelay)
			if err != nil {
				return false, err
			}
			// Nomad's client deregisters the stopping instance, the drain's check with it;
			// removing the check now could send requests back to it first.
			drain.keep()
			return true, d.stoppedAt(ctx, i, index)
		},
	}
}

// stoppedAt records that the stop went out (stopped), at Nomad's index, and has a system
// job's scheduler place the replacement.
func (d *driver) stoppedAt(ctx context.Context, i int, index uint64) error {
	if err := d.stopped(ctx, i, index); err != nil {
		return err
	}
	return d.forceEvalIfSystem(ctx)
}

// stopFailed words a failed stop as Nomad's command does.
func stopFailed(err error) error {
	//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
	return fmt.Errorf("Failed to stop allocation: %w", err)
}

// stopped records that the stop went out. Lazily: a driver that finds the intent without it
// asks Nomad's facts whether the stop took effect.
func (d *driver) stopped(_ context.Context, i int, index uint64) error {
	d.stepProgress(func(r *restart.Record) {
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
	return d.forceEvaluate(ctx)
}

// forceEvaluate creates an evaluation of the job with ForceReschedule. Another evaluation
// does no harm, so the write is retried on what passes (the cluster sends a write once).
func (d *driver) forceEvaluate(ctx context.Context) error {
	err := cluster.RetryDo(ctx, d.e.resendPolicy(), d.log, "evaluating job", func(ctx context.Context) error {
		return d.e.cluster.ForceEvaluate(ctx, d.jobNS, d.jobID)
	})
	if err != nil && ctx.Err() == nil && cluster.IsTransient(err) {
		// The retry's budget is spent (its error says how).
		if werr := d.warnRetriesSpent(ctx, nil, fmt.Sprintf("the evaluation of job %q", d.jobID), nil, err); werr != nil {
			return werr
		}
	}
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
	f := &replacementFollow{d: d, i: i, original: p.ID, cur: p.ID, placement: d.placementFor(wctx, i),
		finishedOK: restart.BatchLike(d.jobType)}
	if p.Replacement != "" {
		f.cur = p.Replacement
	} else if p.Before != nil {
		// From the observation on: only what changed after it shows the stop's effect.
		f.index = p.Before.AllocModifyIndex
	}
	// The feed keeps the allocation followed current between watches.
	d.feed.pin(f.cur)
	defer func() { d.feed.unpin(f.cur) }()
	var seen *restart.Alloc // an answer already read, to judge before watching again
	for {
		a := seen
		seen = nil
		if a == nil {
			var err error
			if a, err = f.watchNext(wctx, cancel); err != nil {
				return err
			}
		}
		switch {
		case a.NextAllocation != "":
			f.replaced(a)
		case restart.ReplacementReady(a, f.original, d.readyMode(), f.finishedOK):
			done, broke, err := f.settle(ctx, a)
			if done {
				return err
			}
			// It broke within the minimum time: judge what broke it (replaced again, or
			// not running) before watching again.
			seen = broke
		}
	}
}

// replacementFollow is the state of followReplacement: the allocation followed along the
// NextAllocation chain and the index its watch is at.
type replacementFollow struct {
	d          *driver
	i          int
	original   string // the allocation restarted
	cur        string // the allocation followed now
	index      uint64
	placement  *placementWatch
	finishedOK bool
}

// watchNext waits for the followed allocation's next change (the cluster retries what
// passes), racing the group's placement failures; cancel ends the watch's context.
func (f *replacementFollow) watchNext(ctx context.Context, cancel context.CancelFunc) (*restart.Alloc, error) {
	cur, index := f.cur, f.index
	res := watchAsync(func() (*restart.Alloc, uint64, error) { return f.d.watchAlloc(ctx, cur, index) })
	select {
	case <-f.placement.done:
		cancel()
		return nil, &allocFailure{f.placement.err}
	case r := <-res:
		if r.err != nil {
			//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
			return nil, &allocFailure{fmt.Errorf("Failed to retrieve allocation %q: %w", f.cur, r.err)}
		}
		f.index = r.index
		return r.a, nil
	}
}

// replaced moves the follow to a's replacement, recorded lazily: a later driver follows the
// NextAllocation chain from the allocation.
func (f *replacementFollow) replaced(a *restart.Alloc) {
	from, to := a.ID, a.NextAllocation
	f.d.stepProgress(func(rec *restart.Record) {
		q := &rec.Allocs[f.i]
		q.Replacement = to
		q.Waiting = fmt.Sprintf("allocation %q to start running", to)
		f.d.eventLocked(restart.Event{Type: restart.EventAllocReplaced, AllocID: q.ID, Batch: q.Batch,
			Message: fmt.Sprintf("Allocation %q replaced by %q, waiting for %q to start running", from, to, to)})
	})
	f.d.feed.pin(to)
	f.d.feed.unpin(f.cur)
	f.cur, f.index = to, 0
}

// settle sees a ready replacement through its health gate, or through the minimum time
// it must stay ready, and records the allocation done. It returns done when the follow is
// over (with its error), else the allocation that broke within the minimum time.
func (f *replacementFollow) settle(ctx context.Context, a *restart.Alloc) (done bool, broke *restart.Alloc, err error) {
	d := f.d
	if d.awaitsReadiness(a) {
		d.stepProgress(func(rec *restart.Record) {
			rec.Allocs[f.i].Waiting = fmt.Sprintf("allocation %q to be healthy", a.ID)
		})
		if err := d.passReadiness(ctx, f.i, a, f.index, runningTasks(a)); err != nil {
			return true, nil, err
		}
		return true, nil, d.doneAlloc(ctx, f.i, fmt.Sprintf("Allocation %q is healthy", a.ID))
	}
	ok, broke, at, err := d.stayedReady(ctx, a.ID, f.index, d.spec.MinHealthyTime, func(x *restart.Alloc) bool {
		return restart.ReplacementReady(x, f.original, d.readyMode(), f.finishedOK)
	})
	if err != nil {
		//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
		return true, nil, &allocFailure{fmt.Errorf("Failed to retrieve allocation %q: %w", f.cur, err)}
	}
	if ok {
		return true, nil, d.doneAlloc(ctx, f.i, fmt.Sprintf("Allocation %q is %q", a.ID, a.ClientStatus))
	}
	f.index = at
	return false, broke, nil
}
