package restart

import (
	"sort"
	"time"
)

// The rules below decide, from Nomad's own facts, whether a request the driver persisted as
// intent took effect, and whether the allocation runs again. They compare Nomad's timestamps
// only with Nomad's timestamps (never with the local clock), and counters with counters.

// TargetTasks returns the tasks a restart in place targets in an allocation: the requested
// ones it has, every task with allTasks, else the tasks running now (Nomad's restart without
// a task name restarts the running tasks and skips the others).
func TargetTasks(a *Alloc, requested []string, allTasks bool) []string {
	var out []string
	switch {
	case len(requested) > 0:
		for _, t := range requested {
			if _, ok := a.Tasks[t]; ok {
				out = append(out, t)
			}
		}
	default:
		for name, ts := range a.Tasks {
			if allTasks || ts.State == TaskRunning {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Observe records what a later driver needs to decide whether a request on the targeted
// tasks took effect: their restart counters and states, the time of the allocation's newest
// task event, and its ModifyIndex.
func Observe(a *Alloc, targets []string) *Observation {
	o := &Observation{AllocModifyIndex: a.ModifyIndex}
	for _, ts := range a.Tasks {
		for _, e := range ts.Events {
			if e.Time.After(o.LastEventTime) {
				o.LastEventTime = e.Time
			}
		}
	}
	for _, t := range targets {
		if o.Restarts == nil {
			o.Restarts = map[string]uint64{}
			o.States = map[string]string{}
		}
		ts := a.Tasks[t]
		o.Restarts[t] = ts.Restarts
		o.States[t] = ts.State
	}
	return o
}

// Targets returns the observed targeted tasks, sorted.
func (o *Observation) Targets() []string {
	out := make([]string, 0, len(o.Restarts))
	for t := range o.Restarts {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func isSignal(t string) bool {
	return t == TaskEventRestartSignaled || t == TaskEventRestarting || t == TaskEventKilling
}

// TaskRestarted reports whether a restart of the task happened after the observation: its
// restart counter went up, or Nomad logged a restart signal, a restart or a kill after the
// newest event observed.
func TaskRestarted(before *Observation, ts TaskState, task string) bool {
	if before == nil {
		return false
	}
	if ts.Restarts > before.Restarts[task] {
		return true
	}
	for _, e := range ts.Events {
		if isSignal(e.Type) && e.Time.After(before.LastEventTime) {
			return true
		}
	}
	return false
}

// PendingTasks returns the targeted tasks on which no restart is seen yet after before.
func PendingTasks(before *Observation, a *Alloc) []string {
	var out []string
	for _, t := range before.Targets() {
		if !TaskRestarted(before, a.Tasks[t], t) {
			out = append(out, t)
		}
	}
	return out
}

// InPlaceTookEffect reports whether a restart request in place reached Nomad: any targeted
// task shows a restart after the observation. With no targeted task observed (nothing was
// running) nothing can tell, and it reports false.
func InPlaceTookEffect(before *Observation, a *Alloc) bool {
	if before == nil || a == nil {
		return false
	}
	return len(before.Restarts) > 0 && len(PendingTasks(before, a)) < len(before.Restarts)
}

// StopTookEffect reports whether a stop request (-reschedule) reached Nomad: the allocation is
// desired to stop (or be evicted), or it was already replaced.
func StopTookEffect(a *Alloc) bool {
	return a.DesiredStatus == DesiredStop || a.DesiredStatus == "evict" || a.NextAllocation != ""
}

// newestSignal is the time of the newest restart signal, restart or kill event after t.
func newestSignal(ts TaskState, after time.Time) time.Time {
	var sig time.Time
	for _, e := range ts.Events {
		if isSignal(e.Type) && e.Time.After(after) && e.Time.After(sig) {
			sig = e.Time
		}
	}
	return sig
}

// startedAfter reports whether the task has a Started event after t.
func startedAfter(ts TaskState, t time.Time) bool {
	for _, e := range ts.Events {
		if e.Type == TaskEventStarted && e.Time.After(t) {
			return true
		}
	}
	return false
}

// TaskRunningAgain reports whether a targeted task runs again after our restart: it is running
// and started after the newest restart signal that followed the observation (or, where Nomad's
// bounded event list lost the events, its counter went up and it is running). A task that was
// not running before (a finished prestart task under -all-tasks), or any task of a batch job
// when finishedOK, also counts when it ran again and finished successfully.
func TaskRunningAgain(before *Observation, ts TaskState, task string, finishedOK bool) bool {
	if before == nil {
		return false
	}
	sig := newestSignal(ts, before.LastEventTime)
	var reran bool
	if !sig.IsZero() {
		reran = startedAfter(ts, sig)
	} else {
		reran = startedAfter(ts, before.LastEventTime)
	}
	counted := ts.Restarts > before.Restarts[task]
	switch ts.State {
	case TaskRunning:
		return reran || counted
	case TaskDead:
		wasRunning := before.States[task] == TaskRunning
		return !ts.Failed && reran && (finishedOK || !wasRunning)
	}
	return false
}

// RunningAgain reports whether the allocation runs again after a restart in place: its client
// status is running (or complete, for a batch job when finishedOK) and every targeted task
// runs again (TaskRunningAgain).
func RunningAgain(before *Observation, a *Alloc, finishedOK bool) bool {
	if before == nil || a == nil {
		return false
	}
	if a.ClientStatus != ClientRunning && !(finishedOK && a.ClientStatus == ClientComplete) {
		return false
	}
	for _, t := range before.Targets() {
		if !TaskRunningAgain(before, a.Tasks[t], t, finishedOK) {
			return false
		}
	}
	return true
}

// ReplacementReady reports whether a replacement allocation (-reschedule) counts as running:
// it is not the original, not itself replaced, and its client status is running (or complete
// for a batch job when finishedOK). With HealthRunning every task must also be running, or
// have finished successfully (lifecycle tasks), and at least one running unless it completed.
func ReplacementReady(a *Alloc, originalID string, health HealthMode, finishedOK bool) bool {
	if a == nil || a.ID == originalID || a.NextAllocation != "" {
		return false
	}
	if finishedOK && a.ClientStatus == ClientComplete {
		return true
	}
	if a.ClientStatus != ClientRunning {
		return false
	}
	return health != HealthRunning || allTasksUp(a.Tasks)
}

// BatchLike reports whether allocations of a job of this type are expected to finish
// (batch and sysbatch), so that a task that ran again and completed counts as restarted.
func BatchLike(jobType string) bool {
	return jobType == "batch" || jobType == "sysbatch"
}
