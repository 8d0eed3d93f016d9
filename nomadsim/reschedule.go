package nomadsim

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// Rescheduling of failed allocations, per the group's reschedule block (Nomad's
// Allocation.NextRescheduleTime and RescheduleEligible).

// rescheduleTime returns when a failed allocation may be replaced, and false when its
// policy allows no further attempt.
func (c *Cluster) rescheduleTime(ar *allocRun, now time.Time) (time.Time, bool) {
	pol := ar.tg.ReschedulePolicy
	if pol == nil {
		return time.Time{}, false
	}
	var events []*api.RescheduleEvent
	if ar.a.RescheduleTracker != nil {
		events = ar.a.RescheduleTracker.Events
	}
	if !deref(pol.Unlimited) {
		attempts, interval := deref(pol.Attempts), deref(pol.Interval)
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
	delay := deref(pol.Delay)
	switch deref(pol.DelayFunction) {
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
	if maxDelay := deref(pol.MaxDelay); maxDelay > 0 && delay > maxDelay {
		delay = maxDelay
	}
	failed := now
	for _, tr := range ar.tasks {
		if tr.st != nil && !tr.st.FinishedAt.IsZero() && tr.st.FinishedAt.Before(failed) {
			failed = tr.st.FinishedAt
		}
	}
	return failed.Add(delay), true
}

func rescheduleTracker(prev *allocRun, now time.Time) *api.RescheduleTracker {
	t := &api.RescheduleTracker{}
	if prev.a.RescheduleTracker != nil {
		t.Events = append(t.Events, prev.a.RescheduleTracker.Events...)
	}
	t.Events = append(t.Events, &api.RescheduleEvent{RescheduleTime: now.UnixNano(), PrevAllocID: prev.a.ID, PrevNodeID: prev.node.n.ID})
	return t
}

// scheduleFollowup creates the delayed evaluation that will reschedule a failed allocation.
func (c *Cluster) scheduleFollowup(j *jobEntry, ar *allocRun, when time.Time) {
	job := j.current()
	i := c.bump(tEvals)
	now := c.nowNano()
	ev := &api.Evaluation{
		ID: c.newID(), Priority: deref(job.Priority), Type: deref(job.Type), TriggeredBy: "alloc-failure",
		Namespace: j.key.ns, JobID: j.key.id, JobModifyIndex: deref(job.JobModifyIndex),
		Status: api.EvalStatusPending, StatusDescription: "created for delayed rescheduling", WaitUntil: when,
		CreateIndex: i, ModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	c.evals[ev.ID] = ev
	j.evals = append(j.evals, ev)
	ar.a.FollowupEvalID = ev.ID
	ar.touchServer("AllocationUpdated")
	c.publishEval(ev)
	c.after(when.Sub(c.clk.now()), func() {
		if c.jobs[j.key] != j || ev.Status != api.EvalStatusPending {
			return
		}
		c.process(j, ev, evalOpts{})
	})
}

// onAllocFailed asks the scheduler to reschedule a failed allocation.
func (c *Cluster) onAllocFailed(ar *allocRun) {
	c.after(0, func() {
		j := c.jobs[ar.job]
		if j == nil || ar.serverTerminal() || ar.a.NextAllocation != "" {
			return
		}
		c.createEval(j, "alloc-failure", evalOpts{})
	})
}
