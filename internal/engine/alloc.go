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

// allocFailure is an allocation's failure, recorded in its progress; it does not stop the
// driver.
type allocFailure struct {
	err error
}

func (f *allocFailure) Error() string { return f.err.Error() }

// handleAlloc brings one allocation from whatever state the record says to a terminal state.
// It returns only errors that stop the driver; allocation failures are recorded.
func (d *driver) handleAlloc(ctx context.Context, i int) error {
	d.mu.Lock()
	spec := d.spec
	group := d.rec.Allocs[i].Group
	d.mu.Unlock()
	// The deadline starts when this driver takes the allocation up (a local-clock deadline,
	// never compared with Nomad's times), so a resumed driver gives it a full period. The
	// checks gate also applies it on Nomad's clock from the tasks' start.
	_, deadline := spec.HealthTimes(group)
	actx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var err error
	if spec.Reschedule {
		err = d.reschedule(actx, i)
	} else {
		err = d.inPlace(actx, i)
	}
	var fail *allocFailure
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case actx.Err() != nil:
		return d.failAlloc(ctx, i, d.deadlineError(i, deadline))
	case errors.As(err, &fail):
		return d.failAlloc(ctx, i, fail.err)
	}
	return err
}

func (d *driver) deadlineError(i int, deadline time.Duration) error {
	d.mu.Lock()
	p := d.rec.Allocs[i]
	d.mu.Unlock()
	what := p.Waiting
	if what == "" {
		what = "the restart"
	}
	return fmt.Errorf("gave up after the healthy deadline of %s waiting for %s", deadline, what)
}

func (d *driver) progress(i int) restart.AllocProgress {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rec.Allocs[i]
}

// failAlloc, skipAlloc and doneAlloc end an allocation's part lazily, as progress (see
// stepProgress): the decision after the batch is made from the driver's copy, and the
// batch's ends are written with it (the decision lingers less), not one by one as the
// allocations of a batch end apart.
func (d *driver) failAlloc(_ context.Context, i int, err error) error {
	d.stepProgress(func(*restart.Record) { d.failLocked(i, err) })
	return nil
}

func (d *driver) failLocked(i int, err error) {
	p := &d.rec.Allocs[i]
	p.Error = fmt.Sprintf("Error restarting allocation %q: %v", p.ID, err)
	p.Unrecovered = restart.Unrecoverable(err)
	p.Waiting = ""
	d.endLocked(p, restart.AllocFailed, restart.EventAllocFailed, p.Error)
}

// endLocked ends an allocation's part in state, now, announced by an event of type typ
// saying msg.
func (d *driver) endLocked(p *restart.AllocProgress, state restart.AllocState, typ restart.EventType, msg string) {
	p.State = state
	p.EndTime = d.e.now()
	d.eventLocked(restart.Event{Type: typ, AllocID: p.ID, Batch: p.Batch, Message: msg})
}

func (d *driver) skipAlloc(_ context.Context, i int, reason string) error {
	d.stepProgress(func(*restart.Record) { d.skipLocked(i, reason) })
	return nil
}

func (d *driver) skipLocked(i int, reason string) {
	p := &d.rec.Allocs[i]
	p.Error = reason
	d.endLocked(p, restart.AllocSkipped, restart.EventAllocSkipped, fmt.Sprintf("Skipping allocation %q because %s", p.ID, reason))
}

func (d *driver) doneAlloc(_ context.Context, i int, msg string) error {
	d.stepProgress(func(r *restart.Record) {
		p := &r.Allocs[i]
		p.Waiting = ""
		d.endLocked(p, restart.AllocDone, restart.EventAllocDone, msg)
	})
	return nil
}

// readAlloc reads an allocation (the cluster retries what passes) and offers it to the feed.
func (d *driver) readAlloc(ctx context.Context, id string) (*restart.Alloc, error) {
	a, err := d.e.cluster.Allocation(ctx, id)
	if err == nil {
		d.feed.offer(a)
	}
	return a, err
}

// stillEligible tells why an allocation planned earlier is no longer to be touched, if so.
func stillEligible(a *restart.Alloc) string {
	switch {
	case !a.IsRunning():
		return fmt.Sprintf("desired status is %q and client status is %q", a.DesiredStatus, a.ClientStatus)
	case a.NextAllocation != "":
		return fmt.Sprintf("it has already been replaced by %q", a.NextAllocation)
	}
	return ""
}

// sendRequest brings allocation i to its request: it takes the allocation up when runBatch
// did not, then, when its intent is recorded, sends req (resend). It returns the
// allocation's progress afterwards, and whether it sent req.
func (d *driver) sendRequest(ctx context.Context, i int, req allocRequest) (restart.AllocProgress, bool, error) {
	p := d.progress(i)
	if p.State == restart.AllocPending {
		// runBatch takes the whole batch up first; this is for an allocation it did not.
		if err := d.takeUp(ctx, []int{i}); err != nil {
			return p, false, err
		}
		p = d.progress(i)
	}
	fresh := d.takeFresh(i)
	if p.State != restart.AllocRestarting {
		return p, false, nil
	}
	if err := d.resend(ctx, i, fresh, req); err != nil {
		return p, true, err
	}
	return d.progress(i), true, nil
}

// inPlace restarts an allocation's tasks in place and waits until they run again.
func (d *driver) inPlace(ctx context.Context, i int) error {
	p, _, err := d.sendRequest(ctx, i, d.restartRequest())
	if err != nil {
		return err
	}
	if p.State != restart.AllocWaiting {
		return nil
	}
	if d.spec.Health == restart.HealthNone {
		// Nomad's behaviour: done once the request returned (the old process exited).
		return d.doneAlloc(ctx, i, fmt.Sprintf("Restarted allocation %q", p.ID))
	}
	return d.waitRunningAgain(ctx, i)
}

// restartMessages are Nomad's lines for an in-place restart: one per named task, else one.
func restartMessages(spec restart.Spec, p *restart.AllocProgress) []string {
	switch {
	case spec.AllTasks:
		return []string{fmt.Sprintf("Restarting all tasks in allocation %q for group %q", p.ID, p.Group)}
	case len(p.Tasks) > 0:
		var out []string
		for _, t := range p.Tasks {
			out = append(out, fmt.Sprintf("Restarting task %q in allocation %q for group %q", t, p.ID, p.Group))
		}
		return out
	}
	return []string{fmt.Sprintf("Restarting running tasks in allocation %q for group %q", p.ID, p.Group)}
}

// restartRequest is the in-place restart of an allocation's targeted tasks, as resend sends
// it: a former attempt took effect when Nomad's task events show it (then the allocation
// waits for its tasks), and a restart of named tasks that took effect on some of them is sent
// again for the others only.
func (d *driver) restartRequest() allocRequest {
	var pending []string  // the tasks a former attempt left to restart,
	var pendingKnown bool // when it restarted named tasks
	return allocRequest{
		name: "restart",
		former: func(ctx context.Context, i int, p restart.AllocProgress) (bool, error) {
			a, tookEffect, err := d.awaitRestartEvidence(ctx, p)
			switch {
			case errors.Is(err, cluster.ErrAllocNotFound):
				return true, d.skipAlloc(ctx, i, "it no longer exists")
			case err != nil:
				return true, &allocFailure{err}
			case tookEffect:
				d.log.Info("restart request of a former attempt took effect; not sending it again", "alloc", p.ID)
				return true, d.toWaiting(ctx, i)
			}
			if pendingKnown = len(p.Tasks) > 0; pendingKnown {
				pending = restart.PendingTasks(p.Before, a)
			}
			return false, nil
		},
		send: func(ctx context.Context, i int, p restart.AllocProgress, fresh bool, _ *allocDrain) (bool, error) {
			tasks := p.Before.Targets()
			if pendingKnown {
				tasks = pending
			}
			d.log.Debug("sending restart", "alloc", p.ID, "tasks", tasks, "attempt", p.Attempts, "fresh", fresh)
			if err := d.requestRestart(ctx, p, tasks); err != nil {
				return false, err
			}
			return true, d.toWaiting(ctx, i)
		},
	}
}

// requestRestart sends Nomad's in-place restart: once for all tasks or the running ones, or
// one request per named task, concurrently, as Nomad's command does.
func (d *driver) requestRestart(ctx context.Context, p restart.AllocProgress, tasks []string) error {
	if len(p.Tasks) == 0 {
		return d.e.cluster.RestartTasks(ctx, p.ID, "", d.spec.AllTasks)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(tasks))
	for k, t := range tasks {
		wg.Go(func() {
			if err := d.e.cluster.RestartTasks(ctx, p.ID, t, false); err != nil {
				//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
				errs[k] = fmt.Errorf("Failed to restart task %q: %w", t, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// toWaiting records that the request went out. Lazily: a driver that finds the intent
// without it asks Nomad's facts whether the request took effect.
func (d *driver) toWaiting(_ context.Context, i int) error {
	d.stepProgress(func(r *restart.Record) {
		p := &r.Allocs[i]
		p.State = restart.AllocWaiting
		p.Waiting = "the tasks to run again"
		if r.Spec.Health != restart.HealthNone {
			d.eventLocked(restart.Event{Type: restart.EventAllocWaiting, AllocID: p.ID, Batch: p.Batch,
				Message: fmt.Sprintf("Waiting for the tasks of allocation %q to run again", p.ID)})
		}
	})
	return nil
}

// waitRunningAgain follows the allocation with blocking queries until every targeted task runs
// again after the restart.
func (d *driver) waitRunningAgain(ctx context.Context, i int) error {
	p := d.progress(i)
	finishedOK := restart.BatchLike(d.jobType)
	// From the observation on: only what changed after it can show the restart (and the
	// feed answers without a read where it holds the allocation since).
	var index uint64
	if p.Before != nil {
		index = p.Before.AllocModifyIndex
	}
	for {
		a, next, err := d.watchAlloc(ctx, p.ID, index)
		if err != nil {
			if errors.Is(err, cluster.ErrAllocNotFound) {
				return &allocFailure{fmt.Errorf("allocation disappeared while waiting for its tasks to run again")}
			}
			return &allocFailure{err} // the cluster retried what passes already
		}
		index = next
		if p.Before == nil {
			if a.ClientStatus == restart.ClientRunning {
				return d.doneAlloc(ctx, i, fmt.Sprintf("Allocation %q is %q", p.ID, a.ClientStatus))
			}
		} else if restart.RunningAgain(p.Before, a, finishedOK) {
			if d.awaitsReadiness(a) {
				if err := d.passReadiness(ctx, i, a, index, runningTargets(p.Before, a)); err != nil {
					return err
				}
				return d.doneAlloc(ctx, i, fmt.Sprintf("Allocation %q is healthy again", p.ID))
			}
			ok, broke, at, err := d.stayedReady(ctx, p.ID, index, d.spec.MinHealthyTime, func(a *restart.Alloc) bool {
				return restart.RunningAgain(p.Before, a, finishedOK)
			})
			if err != nil {
				return &allocFailure{err}
			}
			if ok {
				return d.doneAlloc(ctx, i, fmt.Sprintf("Allocation %q is running again", p.ID))
			}
			a, index = broke, at
		}
		if why := brokenAfterRestart(p.Before, a, finishedOK); why != "" {
			return &allocFailure{errors.New(why)}
		}
	}
}

// brokenAfterRestart tells why waiting for an allocation to run again is hopeless.
func brokenAfterRestart(before *restart.Observation, a *restart.Alloc, finishedOK bool) string {
	switch {
	case a.NextAllocation != "":
		return fmt.Sprintf("allocation was replaced by %q before its tasks ran again", a.NextAllocation)
	case a.DesiredStatus != restart.DesiredRun:
		return fmt.Sprintf("allocation is desired to %s", a.DesiredStatus)
	case a.ClientStatus == restart.ClientFailed || a.ClientStatus == restart.ClientLost:
		return fmt.Sprintf("allocation is %q", a.ClientStatus)
	case a.ClientStatus == restart.ClientComplete && !finishedOK:
		return fmt.Sprintf("allocation is %q", a.ClientStatus)
	}
	if before != nil {
		for _, t := range before.Targets() {
			ts := a.Tasks[t]
			if ts.State == restart.TaskDead && ts.Failed && restart.TaskRestarted(before, ts, t) {
				return fmt.Sprintf("task %q failed after the restart", t)
			}
		}
	}
	return ""
}

// gaveUp says why a cluster.Backoff stopped: ctx's end, or its time spent.
func gaveUp(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return errRetriesSpent
}

var errRetriesSpent = errors.New("the retries' time is spent")
