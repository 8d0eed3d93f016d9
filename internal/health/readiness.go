package health

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// State is where an allocation stands with respect to the gate.
type State string

const (
	Pending State = "pending"
	Healthy State = "healthy"
	Failed  State = "failed"
)

// Verdict is the gate's answer for one allocation at one moment of Nomad's clock.
type Verdict struct {
	State State
	// Since is when the allocation's current healthy stretch began (its tasks all running
	// and its checks passing); set when Healthy, and when Pending only on the min-healthy
	// timer. The allocation was healthy from Since+MinHealthy.
	Since time.Time
	// Reason is the first thing it waits for (Pending) or why it failed (Failed):
	// "task web not yet running", "check http (consul) critical: connection refused",
	// "min healthy time: 4s of 10s".
	Reason string
	// Waiting lists everything it waits for, Reason first.
	Waiting []string
}

// Config is what a Gate judges one allocation by.
type Config struct {
	// Mode is restart.HealthRunning or restart.HealthChecks (restart.HealthNone: healthy at
	// once; resolve restart.HealthAuto first with ResolveMode, the gate treats it as
	// restart.HealthChecks).
	Mode restart.HealthMode
	// Tasks are the tasks the restart targeted; empty means every task of the allocation.
	Tasks []string
	// Checks are the checks that count (AllocChecks); used in restart.HealthChecks only.
	Checks []CheckSpec
	// Since is when the restart took effect for this allocation, on Nomad's clock (for a
	// replacement allocation, when it was created): tasks must have started at or after it,
	// check results read before it are ignored, and the deadline runs from it.
	Since time.Time
	// MinHealthy is how long everything must stay healthy; Deadline is how long after
	// Since (or DeadlineFrom, when later) the allocation may take (zero: no deadline).
	MinHealthy, Deadline time.Duration
	// DeadlineFrom, when after Since, is when the deadline starts to run instead: when the
	// gate was taken up, for a driver that resumes a restart long after the tasks started
	// (it cannot know how long they stayed healthy, and gives them a full period).
	DeadlineFrom time.Time
	// ProvenAt, when set, is when another gate judged the allocation healthy on fresh
	// evidence: statuses of a workload that has not started again since are its own (see
	// fresh.go). The availability budget reads an allocation's checks once per batch, too
	// little to see a Consul status change; it passes on what the batch's gates proved.
	ProvenAt time.Time
}

// Readiness tracks one allocation through its readiness gate (-health; the metric gates,
// -gate, are package gate's). Feed it the allocation as Nomad
// reports it (ObserveAlloc) and the check sources' snapshots (ObserveChecks), and ask it
// for a verdict at a moment of Nomad's clock (Evaluate). It does no I/O and reads no clock;
// it is safe for concurrent use, as sources run in their own goroutines.
type Readiness struct {
	cfg Config

	mu    sync.Mutex
	alloc *restart.Alloc
	// runningSince is the latest start of the allocation's running tasks when all of them
	// run, zero otherwise; started holds each running task's start.
	runningSince time.Time
	started      map[string]time.Time
	// firstRun: no task of the allocation has restarted, so its checks hold no result of
	// an earlier process.
	firstRun bool
	checks   map[Provider]*providerState
}

// providerState is what the gate knows of one provider's checks.
type providerState struct {
	seen     bool
	at       time.Time // the latest snapshot's time
	err      error
	observed []Check // the latest snapshot's checks
	evidence map[string]*evidence
}

// NewReadiness returns the readiness gate of one allocation.
func NewReadiness(cfg Config) *Readiness {
	g := &Readiness{cfg: cfg, checks: map[Provider]*providerState{}}
	if cfg.Mode != restart.HealthRunning && cfg.Mode != restart.HealthNone {
		for _, s := range cfg.Checks {
			if g.checks[s.Provider] == nil {
				g.checks[s.Provider] = &providerState{evidence: map[string]*evidence{}}
			}
		}
	}
	return g
}

// Providers lists the providers whose checks the gate needs, so that the caller starts
// those sources only.
func (g *Readiness) Providers() []Provider {
	var out []Provider
	for p := range g.checks {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ObserveAlloc records the allocation as Nomad reports it now (with task states).
func (g *Readiness) ObserveAlloc(a *restart.Alloc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.alloc = a
	g.runningSince, g.started, g.firstRun = time.Time{}, map[string]time.Time{}, true
	if a == nil || a.Tasks == nil {
		return
	}
	var latest time.Time
	allRunning := true
	for name, ts := range a.Tasks {
		if ts.Restarts > 0 {
			g.firstRun = false
		}
		switch ts.State {
		case restart.TaskRunning:
			g.started[name] = ts.StartedAt
			if ts.StartedAt.After(latest) {
				latest = ts.StartedAt
			}
		case restart.TaskPending:
			allRunning = false
		}
	}
	if allRunning {
		g.runningSince = latest
	}
}

// base is the start of the workload a check probes: its task's, for a task's service; the
// latest of the running tasks' otherwise (a group service's port may be any task's).
func (g *Readiness) base(c Check) time.Time {
	if t, ok := g.started[c.Task]; ok && c.Task != "" {
		return t
	}
	return g.runningSince
}

// ObserveChecks records a source's snapshot. Snapshots of other providers than the gate
// needs, and snapshots read before the restart took effect or before the latest one, are
// ignored.
func (g *Readiness) ObserveChecks(s Snapshot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := g.checks[s.Provider]
	if ps == nil || s.At.Before(g.cfg.Since) || (ps.seen && s.At.Before(ps.at)) {
		return
	}
	ps.seen, ps.at, ps.err = true, s.At, s.Err
	if s.Err != nil {
		// Unknown is not passing: every check's healthy stretch ends here.
		ps.observed = nil
		for _, e := range ps.evidence {
			e.broken()
		}
		return
	}
	ps.observed = s.Checks
	judgedChecks, _ := match(s.Provider, g.cfg.Checks, s.Checks)
	seen := map[string]bool{}
	for _, j := range judgedChecks {
		k := evidenceKey(j.Check)
		seen[k] = true
		e := ps.evidence[k]
		if e == nil {
			e = &evidence{}
			ps.evidence[k] = e
		}
		e.observe(j, s.At, g.base(j.Check))
	}
	for k := range ps.evidence {
		if !seen[k] {
			delete(ps.evidence, k) // deregistered: a registration anew starts over
		}
	}
}

// evidenceKey names a check across snapshots: its ID, which Nomad derives from the
// allocation, service and check definition.
func evidenceKey(c Check) string {
	if c.ID != "" {
		return c.ID
	}
	return c.Service + "\x00" + c.Task + "\x00" + c.Name
}

// Evaluate judges the allocation at now, a moment of Nomad's clock (at or after the
// latest observation).
func (g *Readiness) Evaluate(now time.Time) Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg.Mode == restart.HealthNone {
		return Verdict{State: Healthy, Since: g.cfg.Since}
	}
	failed, waiting := g.tasks()
	if failed != "" {
		return Verdict{State: Failed, Reason: failed, Waiting: []string{failed}}
	}
	since := g.runningSince
	if len(waiting) == 0 {
		for _, p := range g.Providers() {
			ps := g.checks[p]
			switch {
			case !ps.seen:
				waiting = append(waiting, fmt.Sprintf("%s checks not yet read", providerTitle(p)))
			case ps.err != nil:
				waiting = append(waiting, fmt.Sprintf("%s checks unreadable: %v", providerTitle(p), ps.err))
			default:
				from, why := g.judgeProvider(ps, p, now)
				waiting = append(waiting, why...)
				if from.After(since) {
					since = from
				}
			}
		}
	}
	if len(waiting) == 0 {
		healthyFor := now.Sub(since)
		if healthyFor >= g.cfg.MinHealthy {
			return Verdict{State: Healthy, Since: since}
		}
		if healthyFor < 0 {
			healthyFor = 0
		}
		r := fmt.Sprintf("min healthy time: %s of %s", roundDur(healthyFor), roundDur(g.cfg.MinHealthy))
		v := Verdict{State: Pending, Since: since, Reason: r, Waiting: []string{r}}
		return g.deadline(now, v)
	}
	return g.deadline(now, Verdict{State: Pending, Reason: waiting[0], Waiting: waiting})
}

// judgeProvider judges the provider's latest checks at now: what they wait for, else since
// when all of them have let health through on fresh evidence.
func (g *Readiness) judgeProvider(ps *providerState, p Provider, now time.Time) (since time.Time, waiting []string) {
	judgedChecks, missing := match(p, g.cfg.Checks, ps.observed)
	waiting = missing
	for _, j := range judgedChecks {
		e := ps.evidence[evidenceKey(j.Check)]
		if e == nil { // not observed through ObserveChecks: cannot happen, but never pass it
			waiting = append(waiting, staleReason(j, freshness{}, now))
			continue
		}
		f := freshness{proven: true}
		if !j.anyAge() {
			f = e.fresh(j, g.base(j.Check), now, g.cfg.ProvenAt, g.firstRun)
		}
		switch {
		case !f.proven:
			waiting = append(waiting, staleReason(j, f, now))
		case !j.ok:
			waiting = append(waiting, j.why)
		default:
			for _, t := range []time.Time{e.okSince, f.from} {
				if t.After(since) {
					since = t
				}
			}
		}
	}
	return since, waiting
}

// deadline turns a pending verdict into a failure once the healthy deadline has passed.
func (g *Readiness) deadline(now time.Time, v Verdict) Verdict {
	from := g.cfg.Since
	if g.cfg.DeadlineFrom.After(from) {
		from = g.cfg.DeadlineFrom
	}
	if g.cfg.Deadline <= 0 || now.Before(from.Add(g.cfg.Deadline)) {
		return v
	}
	v.State = Failed
	v.Reason = fmt.Sprintf("not healthy within the healthy deadline of %s: %s", g.cfg.Deadline, v.Reason)
	v.Waiting = append([]string{v.Reason}, v.Waiting[1:]...)
	return v
}

// tasks judges the allocation's own state: a reason it can never become healthy, or what
// it waits for.
func (g *Readiness) tasks() (failed string, waiting []string) {
	a := g.alloc
	if a == nil {
		return "", []string{"allocation not yet read"}
	}
	switch a.DesiredStatus {
	case restart.DesiredStop, "evict":
		return fmt.Sprintf("allocation is being stopped (desired status %s)", a.DesiredStatus), nil
	}
	switch a.ClientStatus {
	case restart.ClientRunning:
	case restart.ClientFailed, restart.ClientComplete, restart.ClientLost:
		return fmt.Sprintf("allocation is %s", a.ClientStatus), nil
	default:
		waiting = append(waiting, fmt.Sprintf("allocation is %s", orUnknown(a.ClientStatus)))
	}
	if a.Tasks == nil {
		return "", append(waiting, "task states not yet read")
	}
	names := make([]string, 0, len(a.Tasks))
	for n := range a.Tasks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if ts := a.Tasks[n]; ts.Failed {
			return fmt.Sprintf("task %s failed%s", n, lastEvent(ts)), nil
		}
	}
	targeted := g.cfg.Tasks
	if len(targeted) == 0 {
		targeted = names
	}
	isTarget := map[string]bool{}
	for _, n := range targeted {
		isTarget[n] = true
		ts, ok := a.Tasks[n]
		switch {
		case !ok:
			waiting = append(waiting, fmt.Sprintf("task %s not yet reported", n))
		case ts.State != restart.TaskRunning:
			waiting = append(waiting, fmt.Sprintf("task %s not yet running%s", n, lastEvent(ts)))
		case ts.StartedAt.Before(g.cfg.Since):
			waiting = append(waiting, fmt.Sprintf("task %s not yet restarted", n))
		}
	}
	// Tasks the restart did not target still hold health back while they start (a
	// sidecar restarting with them, say); ephemeral tasks that exited cleanly do not.
	for _, n := range names {
		if !isTarget[n] && a.Tasks[n].State == restart.TaskPending {
			waiting = append(waiting, fmt.Sprintf("task %s not yet running%s", n, lastEvent(a.Tasks[n])))
		}
	}
	return "", waiting
}

// lastEvent is the latest task event worth showing next to a waiting or failed task.
func lastEvent(ts restart.TaskState) string {
	if len(ts.Events) == 0 {
		return ""
	}
	e := ts.Events[len(ts.Events)-1]
	switch e.Type {
	case restart.TaskEventRestarting, restart.TaskEventDriverFailure, restart.TaskEventNotRestarting,
		restart.TaskEventTerminated, restart.TaskEventKilled:
		if m := firstLine(e.Message); m != "" {
			return fmt.Sprintf(" (%s: %s)", e.Type, m)
		}
		return fmt.Sprintf(" (%s)", e.Type)
	}
	return ""
}

func providerTitle(p Provider) string {
	if p == ProviderConsul {
		return "Consul"
	}
	return "Nomad"
}

// roundDur shows durations as operators read them: whole seconds above ten seconds.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Truncate(time.Second)
	case d >= time.Second:
		return d.Truncate(100 * time.Millisecond)
	default:
		return d.Truncate(time.Millisecond)
	}
}
