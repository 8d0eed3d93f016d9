package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// readinessEvalEvery is how often (Nomad's time) the gate is judged between observations, so
// that the min-healthy timer and the deadline are seen to pass.
const readinessEvalEvery = 100 * time.Millisecond

// waitingSaveEvery bounds how often (local time) a changing wait, like the min-healthy
// timer's progress, is written to the record; a new kind of wait is written at once.
const waitingSaveEvery = 2 * time.Second

// passReadiness holds an allocation whose tasks run again (or a replacement that runs)
// until its readiness gate says healthy (nil), or failed (an allocFailure with the gate's
// reason). It
// follows the allocation with blocking queries and its checks with the sources, and judges
// on Nomad's clock. tasks are the targeted tasks (nil: all).
func (d *driver) passReadiness(ctx context.Context, i int, a *restart.Alloc, index uint64, tasks []string) error {
	job, sources, err := d.readinessDeps(ctx)
	if err != nil {
		return &allocFailure{err}
	}
	minH, deadline := d.spec.HealthTimes(a.Group)
	tasks = health.LongRunning(job, a.Group, tasks)
	d.e.observeTimes(a)
	g := health.NewReadiness(health.Config{
		Mode: restart.HealthChecks, Tasks: tasks, Checks: health.AllocChecks(job, a),
		Since: tasksStarted(a, tasks), MinHealthy: minH, Deadline: deadline,
		// A resumed driver may take up an allocation whose tasks started long ago: it
		// cannot know how long they stayed healthy, and gives them a full period.
		DeadlineFrom: d.e.nomadNow()(),
	})
	g.ObserveAlloc(a)
	var w waitSaver
	return d.judgeReadiness(ctx, g, &sources, a.ID, "allocation", index, func(reason string) error {
		return w.save(ctx, d, i, reason)
	})
}

// judgeReadiness feeds readiness gate g with allocation id's changes after index and, when
// sources is not nil, with its checks, and judges it on Nomad's clock until it says healthy
// (nil) or failed (an allocFailure with the gate's reason). onWait, when not nil, hears the
// gate's reason after each judgement that is neither; its error ends the wait. what names
// the allocation in errors ("allocation", "surge allocation").
func (d *driver) judgeReadiness(ctx context.Context, g *health.Readiness, sources *health.Sources, id, what string, index uint64, onWait func(reason string) error) error {
	now := d.e.nomadNow()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcErr := make(chan error, 1)
	if sources != nil {
		go func() { srcErr <- sources.Watch(wctx, g, id) }()
	}
	allocs := d.followAlloc(wctx, id, index)
	tick := d.readinessTicker()
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-srcErr:
			srcErr = nil // nil: no checks to watch
			if err != nil && ctx.Err() == nil {
				return &allocFailure{err}
			}
		case r := <-allocs:
			if r.err != nil {
				return &allocFailure{fmt.Errorf("following %s %q: %w", what, id, r.err)}
			}
			d.e.observeTimes(r.a)
			g.ObserveAlloc(r.a)
		case <-tick.C:
		}
		v := g.Evaluate(now())
		switch v.State {
		case health.Healthy:
			d.setProven(id, now())
			return nil
		case health.Failed:
			return &allocFailure{errors.New(v.Reason)}
		}
		if onWait != nil {
			if err := onWait(v.Reason); err != nil {
				return err
			}
		}
	}
}

// setProven records that allocation id's gate judged it healthy at `at` (Nomad's clock).
func (d *driver) setProven(id string, at time.Time) {
	d.provenMu.Lock()
	defer d.provenMu.Unlock()
	if d.proven == nil {
		d.proven = map[string]time.Time{}
	}
	d.proven[id] = at
}

// provenAt is when allocation id's gate judged it healthy in this driver (zero: never).
func (d *driver) provenAt(id string) time.Time {
	d.provenMu.Lock()
	defer d.provenMu.Unlock()
	return d.proven[id]
}

// allocChange is an allocation's new state (nil: none within a watch's wait) and the index
// reached, or the error that ended following it.
type allocChange struct {
	a     *restart.Alloc
	index uint64
	err   error
}

// followAlloc sends the allocation's every change after index until ctx ends; a failure
// (the cluster retried what passes already) is sent as the last change. Each wait is
// bounded by readinessWatchWait.
func (d *driver) followAlloc(ctx context.Context, id string, index uint64) <-chan allocChange {
	out := make(chan allocChange, 1)
	go func() {
		for {
			x, next, err := d.watchAllocFor(ctx, id, index, readinessWatchWait)
			if err == nil && x == nil {
				continue // the wait ended with no change
			}
			if err != nil {
				if ctx.Err() == nil {
					out <- allocChange{err: err}
				}
				return
			}
			index = next
			select {
			case out <- allocChange{a: x, index: next}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// readinessTicker ticks every readinessEvalEvery of Nomad's time, so that a readiness gate
// sees its timers pass.
func (d *driver) readinessTicker() *time.Ticker {
	scale := d.e.health.TimeScale
	if scale <= 0 {
		scale = 1
	}
	return time.NewTicker(max(time.Duration(float64(readinessEvalEvery)/scale), 5*time.Millisecond))
}

// readinessWatchWait bounds each blocking read of an allocation that a gate follows. The gate
// ends (and abandons its read) when the checks pass, and Nomad holds an abandoned blocking
// query's connection, counted against the client address's limit, until its wait ends:
// with a batch of gates ending together, long waits would pile up there.
const readinessWatchWait = 5 * time.Second

// watchAllocFor is WatchAllocation with Nomad's wait bounded by wait. It returns a nil
// allocation and no error when the wait ended with no change.
func (d *driver) watchAllocFor(ctx context.Context, id string, index uint64, wait time.Duration) (*restart.Alloc, uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	a, next, err := d.watchAlloc(cctx, id, index)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return nil, index, nil
	}
	return a, next, err
}

// watchAlloc is WatchAllocation answered from the driver's allocation feed where it can
// (no request), from a blocking query otherwise.
func (d *driver) watchAlloc(ctx context.Context, id string, index uint64) (*restart.Alloc, uint64, error) {
	if d.feed != nil {
		a, err := d.feed.wait(ctx, id, index)
		switch {
		case err == nil:
			return a, a.ModifyIndex, nil
		case ctx.Err() != nil:
			return nil, 0, fmt.Errorf("watching allocation %q: %w", id, ctx.Err())
		}
	}
	a, next, err := d.e.cluster.WatchAllocation(ctx, id, index)
	if err == nil {
		d.feed.offer(a)
	}
	return a, next, err
}

// tasksStarted is when the restart took effect on Nomad's clock, as far as the gate needs:
// the earliest start of the targeted tasks that run (all running tasks when tasks is nil).
func tasksStarted(a *restart.Alloc, tasks []string) time.Time {
	var at time.Time
	consider := func(ts restart.TaskState) {
		if ts.State == restart.TaskRunning && !ts.StartedAt.IsZero() && (at.IsZero() || ts.StartedAt.Before(at)) {
			at = ts.StartedAt
		}
	}
	if len(tasks) == 0 {
		for _, ts := range a.Tasks {
			consider(ts)
		}
	} else {
		for _, t := range tasks {
			consider(a.Tasks[t])
		}
	}
	return at
}

// waitSaver keeps AllocProgress.Waiting current without a write per evaluation: a new kind
// of wait (another task, another check, the timer) is written and announced at once; the
// same kind with new figures (the timer's progress, a check's output) at most every
// waitingSaveEvery.
type waitSaver struct {
	kind  string
	saved time.Time
	text  string
}

func (w *waitSaver) save(_ context.Context, d *driver, i int, reason string) error {
	newKind, due := w.due(reason)
	if !due {
		return nil
	}
	// Lazily: what an allocation waits for is for humans; a later driver finds it again.
	d.stepProgress(func(r *restart.Record) {
		p := &r.Allocs[i]
		p.Waiting = reason
		if newKind {
			d.eventLocked(restart.Event{Type: restart.EventAllocHealth, AllocID: p.ID, Batch: p.Batch,
				Message: fmt.Sprintf("Allocation %q waits for: %s", p.ID, reason)})
		}
	})
	return nil
}

// due says whether a wait for reason is to be written now (a new text of a new kind, or of
// the same kind after waitingSaveEvery), and whether it is a new kind to announce; when due,
// it counts the wait as written.
func (w *waitSaver) due(reason string) (newKind, due bool) {
	if reason == w.text {
		return false, false
	}
	kind := waitKind(reason)
	now := time.Now()
	newKind = kind != w.kind
	if !newKind && now.Sub(w.saved) < waitingSaveEvery {
		return false, false
	}
	w.kind, w.saved, w.text = kind, now, reason
	return newKind, true
}

// waitKind is a wait's text without its figures, so that "min healthy time: 4s of 10s"
// and "min healthy time: 5s of 10s" are one kind; a check's output is left out as well.
func waitKind(reason string) string {
	if i := strings.Index(reason, ": "); i >= 0 && !strings.HasPrefix(reason, "min healthy time") {
		reason = reason[:i]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsDigit(r) || r == '.' {
			return -1
		}
		return r
	}, reason)
}

// awaitsReadiness reports whether the allocation, now running again, must pass the
// readiness gate on its checks: -health checks, unless it already completed as a batch
// allocation may.
func (d *driver) awaitsReadiness(a *restart.Alloc) bool {
	return d.spec.Health == restart.HealthChecks && a.ClientStatus == restart.ClientRunning
}

// readyMode is the mode the running-again rules apply before the gate: checks first need
// everything running.
func (d *driver) readyMode() restart.HealthMode {
	if d.spec.Health == restart.HealthChecks {
		return restart.HealthRunning
	}
	return d.spec.Health
}

// runningTargets are the targeted tasks that run: a targeted task that ran again and
// finished (a prestart hook under -all-tasks) has done what it should, and the gate must
// not wait for it to run.
func runningTargets(before *restart.Observation, a *restart.Alloc) []string {
	var out []string
	for _, t := range before.Targets() {
		if a.Tasks[t].State == restart.TaskRunning {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return runningTasks(a)
	}
	return out
}

// runningTasks are the allocation's running tasks, sorted: what the gate follows on a
// replacement, whose finished prestart tasks are done, not waited for.
func runningTasks(a *restart.Alloc) []string {
	var out []string
	for name, ts := range a.Tasks {
		if ts.State == restart.TaskRunning {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
