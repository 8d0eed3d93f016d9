package sim

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// Rescheduling of failed allocations, per the group's reschedule block (Nomad's
// Allocation.NextRescheduleTime and RescheduleEligible).

// rescheduleTime returns when a failed allocation may be replaced, and false when its
// policy allows no further attempt.
func (c *Cluster) rescheduleTime(ar *AllocRun, now time.Time) (time.Time, bool) {
	pol := ar.Group.ReschedulePolicy
	if pol == nil {
		return time.Time{}, false
	}
	var events []*api.RescheduleEvent
	if ar.Alloc.RescheduleTracker != nil {
		events = ar.Alloc.RescheduleTracker.Events
	}
	if !Deref(pol.Unlimited) {
		attempts, interval := Deref(pol.Attempts), Deref(pol.Interval)
		recent := 0
		for _, e := range events {
			if interval == 0 || now.Sub(time.Unix(0, e.RescheduleTime)) < interval {
				recent++
			}
		}
		if attempts == 0 || recent >= attempts {
			return time.Time{}, false
		}
	}
	delay := Deref(pol.Delay)
	switch Deref(pol.DelayFunction) {
	case "exponential":
		for range events {
			delay *= 2
		}
	case "fibonacci":
		a, b := delay, delay
		for range events {
			a, b = b, a+b
		}
		delay = a
	}
	if maxDelay := Deref(pol.MaxDelay); maxDelay > 0 && delay > maxDelay {
		delay = maxDelay
	}
	failed := now
	for _, tr := range ar.Tasks {
		if tr.State != nil && !tr.State.FinishedAt.IsZero() && tr.State.FinishedAt.Before(failed) {
			failed = tr.State.FinishedAt
		}
	}
	return failed.Add(delay), true
}

func rescheduleTracker(prev *AllocRun, now time.Time) *api.RescheduleTracker {
	t := &api.RescheduleTracker{}
	if prev.Alloc.RescheduleTracker != nil {
		t.Events = append(t.Events, prev.Alloc.RescheduleTracker.Events...)
	}
	t.Events = append(t.Events, &api.RescheduleEvent{RescheduleTime: now.UnixNano(), PrevAllocID: prev.Alloc.ID, PrevNodeID: prev.Node.Node.ID})
	return t
}

// scheduleFollowup creates the delayed evaluation that will reschedule a failed allocation.
func (c *Cluster) scheduleFollowup(j *JobEntry, ar *AllocRun, when time.Time) {
	job := j.Current()
	i := c.Bump(TableEvals)
	now := c.NowNano()
	ev := &api.Evaluation{
		ID: c.newID(), Priority: Deref(job.Priority), Type: Deref(job.Type), TriggeredBy: "alloc-failure",
		Namespace: j.Key.Namespace, JobID: j.Key.ID, JobModifyIndex: Deref(job.JobModifyIndex),
		Status: api.EvalStatusPending, StatusDescription: "created for delayed rescheduling", WaitUntil: when,
		CreateIndex: i, ModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	c.Evals[ev.ID] = ev
	j.Evals = append(j.Evals, ev)
	ar.Alloc.FollowupEvalID = ev.ID
	ar.TouchServer("AllocationUpdated")
	c.publishEval(ev)
	c.after(when.Sub(c.Clock.Now()), func() {
		if c.Jobs[j.Key] != j || ev.Status != api.EvalStatusPending {
			return
		}
		c.process(j, ev, EvalOpts{})
	})
}

// onAllocFailed asks the scheduler to reschedule a failed allocation.
func (c *Cluster) onAllocFailed(ar *AllocRun) {
	c.after(0, func() {
		j := c.Jobs[ar.Job]
		if j == nil || ar.ServerTerminal() || ar.Alloc.NextAllocation != "" {
			return
		}
		c.CreateEval(j, "alloc-failure", EvalOpts{})
	})
}
