package health

import (
	"fmt"
	"time"
)

// A check's status can be older than the process it is read for. Nomad keeps a check's
// last result across an in-place restart until the check runs again (its checks hook has no
// restart hook: the observer goes on at its interval), and Consul keeps a service's check
// status until the check runs again or the service is registered anew, which for group
// services Nomad does before it stops the tasks. A check that runs every 5 s then reads
// "success" while the restarted task still starts, and a gate that trusted it would take an
// instance out of service and call it healthy. So a status lets health through only once it
// is proven to come from a run after the checked workload's latest start:
//
//   - Nomad stamps each result with the time its run began, to the whole second: a result
//     counts when its second is after the second the task started in (equal is not after:
//     the run may have begun before the start within that second).
//   - Consul's statuses carry no time, but its source follows them with blocking queries,
//     which answer as soon as a status changes: a change seen in an unbroken series of
//     snapshots happened when it was seen. A change seen more than freshMargin after the
//     start, or a status that is not passing seen then, proves that what the check shows
//     from then on comes from runs after the start. And once FailuresBeforeCritical runs
//     (at least one) of Interval, and a Timeout, have passed since the start, plus
//     freshMargin, the check has run since the start whatever it shows. (On an in-place
//     restart Nomad registers a group's services anew, critical, before it stops the tasks,
//     and a task's services once it runs again: seen on Nomad 2.0 with Consul 1.20. The
//     first passing status after a restart is then a change; if the check happened to run
//     between the registration and the stop, its passing status is the old process's, and
//     only the time bound proves it.)
//   - An allocation none of whose tasks ever restarted holds only its own results: its
//     checks were registered with it and ran against nothing older (Nomad's checks start
//     pending, Consul's as their initial_status, critical unless the job says otherwise).
//
// The rule is the same wherever the gate is used: in place, for a replacement (-reschedule),
// for surge allocations, in config-change rollouts and fleets' children, and in the
// availability budget's view of the allocations outside a batch.

// freshMargin is how much later than a task's start a Consul status must be observed to
// count as produced after it: Consul's catalog follows the agent that runs the check with a
// short delay, and the gate reads Nomad's clock through an estimate.
const freshMargin = time.Second

// defaultCheckInterval is Nomad's interval for a check whose definition the gate lacks.
const defaultCheckInterval = 10 * time.Second

// evidence is what the gate has seen of one check: its latest status, how long it has let
// health through, and the proof, when there is one, that a status came from a run after the
// workload's latest start.
type evidence struct {
	status   string
	resultAt time.Time // Nomad: when the latest result's run began (to the second)
	// seenAt is the first snapshot showing the latest result (status and, for Nomad, run
	// time); lastAt the latest snapshot showing the check, zero when the series of
	// snapshots broke (a source error); changedAt the snapshot that showed the status change
	// to the latest in an unbroken series.
	seenAt, lastAt, changedAt time.Time
	// okSince is the first snapshot of the current unbroken run of statuses that let health
	// through; zero while the latest does not.
	okSince time.Time
	// proofBase is the workload start that proofAt's status is proven to follow.
	proofBase, proofAt time.Time
}

// observe records the check as a snapshot taken at shows it, with the start of the workload
// it checks (base) as the gate knows it then.
func (e *evidence) observe(j judged, at, base time.Time) {
	if e.seenAt.IsZero() || e.status != j.Status || !e.resultAt.Equal(j.Time) {
		e.seenAt = at
	}
	if !e.lastAt.IsZero() && e.status != j.Status {
		e.changedAt = at
	}
	e.status, e.resultAt, e.lastAt = j.Status, j.Time, at
	switch {
	case !j.ok:
		e.okSince = time.Time{}
	case e.okSince.IsZero():
		e.okSince = at
	}
	e.prove(j.Provider, base)
}

// prove records, when the latest status proves it, that what the check shows follows base.
func (e *evidence) prove(p Provider, base time.Time) {
	if base.IsZero() || e.proofBase.Equal(base) {
		return
	}
	switch p {
	case ProviderNomad:
		if !e.resultAt.IsZero() && e.resultAt.Unix() > base.Unix() {
			e.proofBase, e.proofAt = base, e.seenAt
		}
	case ProviderConsul:
		after := base.Add(freshMargin)
		switch {
		case e.changedAt.After(after):
			e.proofBase, e.proofAt = base, e.changedAt
		case e.status != ConsulPassing && e.lastAt.After(after):
			e.proofBase, e.proofAt = base, e.lastAt
		}
	}
}

// broken records that the series of snapshots broke: a change seen next may have happened
// at any time since the last one, and what the check shows is unknown until then.
func (e *evidence) broken() {
	e.lastAt, e.okSince = time.Time{}, time.Time{}
}

// freshness is the verdict on how fresh a check's status is.
type freshness struct {
	proven bool
	// from is when the status became known fresh (zero: from the start); when not proven,
	// next is when a fresh one is expected.
	from, next time.Time
}

// fresh judges whether the check's status comes from a run after base, the start of the
// workload it checks, at now (Nomad's clock). firstRun says no task of the allocation ever
// restarted; provenAt is Config.ProvenAt.
func (e *evidence) fresh(j judged, base, now, provenAt time.Time, firstRun bool) freshness {
	if firstRun && !(j.Provider == ProviderConsul && j.spec != nil && j.spec.InitialStatus == ConsulPassing) {
		return freshness{proven: true}
	}
	if !provenAt.IsZero() && !base.After(provenAt) {
		return freshness{proven: true}
	}
	e.prove(j.Provider, base)
	if e.proofBase.Equal(base) && !base.IsZero() {
		return freshness{proven: true, from: e.proofAt}
	}
	interval, timeout, runs := defaultCheckInterval, time.Duration(0), 1
	if s := j.spec; s != nil {
		if s.Interval > 0 {
			interval = s.Interval
		}
		timeout, runs = s.Timeout, max(1, s.FailuresBeforeCritical)
	}
	if j.Provider == ProviderNomad {
		if e.resultAt.IsZero() {
			return freshness{}
		}
		// The next run begins an interval after the last began, within the second its time
		// is stamped to.
		return freshness{next: e.resultAt.Add(interval + time.Second)}
	}
	bound := base.Add(time.Duration(runs)*interval + timeout + freshMargin)
	if !now.Before(bound) {
		return freshness{proven: true, from: bound}
	}
	return freshness{next: bound}
}

// staleReason is what the gate waits for while a check shows nothing from after the start:
// `check http (nomad): no result since the restart; next in about 4s`.
func staleReason(j judged, f freshness, now time.Time) string {
	s := fmt.Sprintf("check %s (%s): no result since the restart", j.Name, j.Provider)
	if f.next.IsZero() {
		return s
	}
	if d := f.next.Sub(now); d > 0 {
		return s + fmt.Sprintf("; next in about %s", roundUp(d))
	}
	return s + "; the next is due"
}

// roundUp shows a wait as a whole number of seconds, rounded up, so that "about 1s" never
// reads as nothing left.
func roundUp(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}
