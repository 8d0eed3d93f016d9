package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// scheduleRunner starts the occurrences of scheduled restarts (`run -at`, `run -every`,
// kept by the schedule package); the Agent's dispatchDrives then drives them like any
// other restart, and the fleet runner the fleets of fleet schedules (schedule_fleet.go). It keeps one blocking list query on the schedules' variables and a timer
// to the earliest due time, and polls nothing. Each due occurrence becomes a detached
// restart whose ID derives from the schedule and the due time: agents racing on one
// occurrence collide on the restart store's Create, so one restart exists, and the
// schedule then moves on with check-and-set, so one agent records the occurrence. A crash
// between the two is repaired by the next pass (its Create collides; it just records the
// occurrence).
type scheduleRunner struct {
	a       *Agent
	store   *schedule.Store
	log     *slog.Logger
	metrics *scheduleMetrics
	now     func() time.Time
	wait    time.Duration // the list query's wait
	retry   time.Duration // before trying again a schedule whose handling failed
	rate    clockRate

	mu    sync.Mutex
	metas map[string]schedule.Meta // the latest listing, by namespace and ID
	index uint64                   // the listing's index (0: not listed yet)

	// cache holds the schedules as last read, by namespace and ID (only the loop uses it).
	cache map[string]*schedule.Schedule
	// retryAt holds, by namespace and ID, when a schedule whose handling failed is tried again.
	retryAt map[string]time.Time
}

// startScheduleRunner runs the scheduleRunner until ctx ends; Run waits for it. It needs
// the Nomad store: schedules live in Nomad Variables, where every agent reads them.
func (a *Agent) startScheduleRunner(ctx context.Context) {
	if a.cfg.Schedules == nil {
		a.log.Info("scheduled restarts are off: they need the Nomad store (-state nomad)")
		return
	}
	s := &scheduleRunner{a: a, store: a.cfg.Schedules, log: a.log.With("component", "scheduler"),
		metrics: a.metrics.scheduleMetrics(), now: a.cfg.Now, wait: a.cfg.ListWait, retry: a.cfg.RetryFailed,
		metas: map[string]schedule.Meta{}, cache: map[string]*schedule.Schedule{}, retryAt: map[string]time.Time{}}
	s.rate = newClockRate(s.now)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		s.run(ctx)
	}()
}

func (s *scheduleRunner) run(ctx context.Context) {
	runLoop(ctx, s.watch, nil, nil, s.pass)
}

// watch keeps the blocking list query on the schedules and signals each change.
func (s *scheduleRunner) watch(ctx context.Context, changed chan<- struct{}) {
	w := &cluster.Watch{What: "listing schedules", Log: s.log.With("namespace", s.a.cfg.Namespace),
		Policy: watchRetryPolicy(), MinGap: s.a.cfg.MinListGap}
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		metas, last, err := s.store.ListMeta(ctx, s.a.cfg.Namespace, index, s.wait)
		if err != nil {
			return 0, err
		}
		// The first answer (index 0: the first, or after a reset) is always news.
		if index == 0 || last != index {
			byKey := make(map[string]schedule.Meta, len(metas))
			for _, m := range metas {
				byKey[m.Namespace+"\x00"+m.ID] = m
			}
			s.mu.Lock()
			s.metas, s.index = byKey, max(last, 1)
			s.mu.Unlock()
			signal(changed)
		}
		return last, nil
	})
}

// pass reads the schedules that changed, starts the occurrences that are due, and returns
// how long (in real time) until the earliest next due time.
func (s *scheduleRunner) pass(ctx context.Context) time.Duration {
	s.mu.Lock()
	metas, listed := s.metas, s.index != 0
	s.mu.Unlock()
	if !listed {
		return time.Hour // the first listing signals
	}
	for k := range s.cache {
		if _, ok := metas[k]; !ok {
			delete(s.cache, k) // removed (unschedule)
			delete(s.retryAt, k)
		}
	}
	var earliest time.Time
	for k, m := range metas {
		if ctx.Err() != nil {
			return time.Hour
		}
		sc := s.cache[k]
		if sc == nil || sc.ModifyIndex < m.ModifyIndex {
			fresh, err := s.store.Get(ctx, m.Namespace, m.ID)
			if errors.Is(err, schedule.ErrNotFound) {
				delete(s.cache, k)
				continue
			}
			if err != nil {
				s.log.Warn("reading a schedule failed", "schedule", m.ID, "namespace", m.Namespace, "err", err)
				s.retryAt[k] = s.now().Add(s.retry)
				earliest = earlier(earliest, s.retryAt[k])
				continue
			}
			sc = fresh
			s.cache[k] = sc
		}
		now := s.now()
		if at, ok := s.retryAt[k]; ok && now.Before(at) {
			earliest = earlier(earliest, at)
			continue
		}
		delete(s.retryAt, k)
		if sc.Due(now) || sc.Pending != nil {
			if next, err := s.handle(ctx, sc, now); err != nil {
				if ctx.Err() != nil {
					return time.Hour
				}
				s.log.Warn("handling a due schedule failed; will try again", append(scheduleAttrs(sc), "retry_in", s.retry, "err", err)...)
				s.retryAt[k] = s.now().Add(s.retry)
				earliest = earlier(earliest, s.retryAt[k])
				continue
			} else if next != nil {
				sc = next
				s.cache[k] = sc
			}
		}
		if sc.Status == schedule.StatusActive && !sc.Next.IsZero() {
			earliest = earlier(earliest, sc.Next)
		}
		if sc.Pending != nil { // claimed elsewhere: finish it if its claimer does not
			earliest = earlier(earliest, sc.Pending.Since.Add(pendingTakeover))
		}
	}
	if earliest.IsZero() {
		return time.Hour // nothing scheduled: the watch wakes the loop on a new schedule
	}
	return s.rate.realWait(earliest.Sub(s.now()))
}

func earlier(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// pendingTakeover is how long (on the agent's clock) an occurrence claimed by another
// agent may stay pending before this one finishes it: the claimer died between claiming
// and recording the outcome.
const pendingTakeover = time.Minute

// handle records the due occurrences of sc, starts the one to run, and advances the
// schedule. It returns the schedule as now stored, or nil when it is gone.
//
// Two steps, each a check-and-set on the schedule: the claim (missed occurrences
// recorded, Next advanced, the occurrence to run made Pending with this agent as holder),
// then, after creating its restart, the outcome. Of agents racing on one due time one
// claims it; only the claimer creates the restart, unless its claim grows older than
// pendingTakeover (it died), when any agent finishes it. Creating is idempotent: the
// restart ID derives from the schedule and the due time, so a second try collides with
// the first restart instead of adding one.
func (s *scheduleRunner) handle(ctx context.Context, sc *schedule.Schedule, now time.Time) (*schedule.Schedule, error) {
	if sc.Pending == nil {
		step, err := sc.Plan(now)
		if err != nil {
			return nil, err
		}
		cur, claimed, err := s.claim(ctx, sc, step, now)
		if err != nil || !claimed || cur.Pending == nil {
			return cur, err
		}
		sc = cur
	} else if sc.Pending.Holder != s.a.cfg.Holder && now.Sub(sc.Pending.Since) < pendingTakeover {
		return sc, nil // another agent is starting it
	}
	due := sc.Pending.Due
	out, err := s.start(ctx, sc, due)
	if err != nil {
		return nil, err // the claim stays; this agent tries again, others after the takeover time
	}
	finished := false
	// What was started is recorded even when the agent is stopping meanwhile: the restart
	// or fleet exists now, and a schedule left claiming it would be finished only by the
	// next agent's takeover, after pendingTakeover.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeWriteTimeout)
	defer cancel()
	cur, err := s.store.Mutate(rctx, sc.Namespace, sc.ID, func(cur *schedule.Schedule) (bool, error) {
		finished = cur.Pending != nil && cur.Pending.Due.Equal(due) && cur.Finish(out, s.now())
		return finished, nil
	})
	if errors.Is(err, schedule.ErrNotFound) {
		return nil, nil // unscheduled meanwhile; a restart started for it runs on
	}
	if err != nil {
		return nil, fmt.Errorf("recording the outcome of schedule %s: %w", sc.ID, err)
	}
	if finished {
		s.logOutcome(sc, due, out, cur)
	}
	return cur, nil
}

// outcomeWriteTimeout bounds the write of an occurrence's outcome once its restart or
// fleet was started, which does not end with the agent's context.
const outcomeWriteTimeout = 10 * time.Second

// claim applies step to the stored schedule with check-and-set, unless another agent has
// moved it past sc.Next already (then it reports false).
func (s *scheduleRunner) claim(ctx context.Context, sc *schedule.Schedule, step schedule.Step, now time.Time) (*schedule.Schedule, bool, error) {
	claimed := false
	cur, err := s.store.Mutate(ctx, sc.Namespace, sc.ID, func(cur *schedule.Schedule) (bool, error) {
		claimed = cur.Next.Equal(sc.Next) && cur.Status == schedule.StatusActive && cur.Pending == nil
		if claimed {
			cur.Claim(step, s.a.cfg.Holder, now)
		}
		return claimed, nil
	})
	if errors.Is(err, schedule.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("recording schedule %s: %w", sc.ID, err)
	}
	if claimed && step.Missed > 0 {
		s.metrics.missed.Add(float64(step.Missed))
		s.log.Warn("scheduled restart missed", append(scheduleAttrs(sc),
			"missed", step.Missed, "last_missed_due", step.LastMissed.UTC().Format(time.RFC3339), "reason", step.MissedReason)...)
	}
	if claimed && cur.Status == schedule.StatusDone {
		s.log.Info("schedule done: it has no more occurrences", scheduleAttrs(sc)...)
	}
	return cur, claimed, nil
}

func (s *scheduleRunner) logOutcome(sc *schedule.Schedule, due time.Time, out schedule.Outcome, cur *schedule.Schedule) {
	s.metrics.occurrences.WithLabelValues(string(out.Result)).Inc()
	attrs := append(scheduleAttrs(sc), "due", due.UTC().Format(time.RFC3339), "result", out.Result)
	if out.RestartID != "" && sc.IsFleet() {
		attrs = append(attrs, "fleet", out.RestartID)
	} else if out.RestartID != "" {
		attrs = append(attrs, "restart", out.RestartID)
	}
	if out.Reason != "" {
		attrs = append(attrs, "reason", out.Reason)
	}
	if out.Result == schedule.ResultFailed {
		s.log.Warn("scheduled restart not started", attrs...)
	} else {
		s.log.Info("scheduled restart", attrs...)
	}
	if cur.Status == schedule.StatusDone {
		s.log.Info("schedule done: it has no more occurrences", scheduleAttrs(sc)...)
	}
}

// start creates the occurrence's restart, detached: the agents' adoption drives it. A
// restart already there under the occurrence's ID (another agent's, or ours before a
// crash) counts as started. An error means nothing was decided: the agent is stopping,
// or the store failed, and the occurrence is tried again. A fleet schedule's occurrence
// is a fleet (startFleet).
func (s *scheduleRunner) start(ctx context.Context, sc *schedule.Schedule, due time.Time) (schedule.Outcome, error) {
	if sc.IsFleet() {
		return s.startFleet(ctx, sc, due)
	}
	id := schedule.OccurrenceID(sc.ID, due)
	started := schedule.Outcome{Result: schedule.ResultStarted, RestartID: id}
	st := s.a.cfg.Store
	if _, err := st.Get(ctx, sc.Namespace, id); err == nil {
		return started, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return schedule.Outcome{}, fmt.Errorf("looking for the occurrence's restart %s: %w", id, err)
	}
	plan, err := s.a.eng.Plan(ctx, engine.Request{Namespace: sc.Namespace, Job: sc.JobID, Spec: sc.RestartSpec()})
	if err != nil {
		if ctx.Err() != nil {
			return schedule.Outcome{}, ctx.Err()
		}
		var dep *engine.DeploymentError
		if errors.As(err, &dep) {
			return schedule.Outcome{Result: schedule.ResultSkipped, Reason: err.Error()}, nil
		}
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: err.Error()}, nil
	}
	rec := plan.Record
	if rec.JobID != sc.JobID || rec.Namespace != sc.Namespace {
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: fmt.Sprintf("job %q of namespace %q resolved to job %q of namespace %q; remove the schedule and schedule the job by its full ID", sc.JobID, sc.Namespace, rec.JobID, rec.Namespace)}, nil
	}
	if len(rec.Allocs) == 0 {
		return schedule.Outcome{Result: schedule.ResultSkipped, Reason: "no allocations to restart"}, nil
	}
	rec.ID = id
	// The created event names the schedule, so that status shows where the restart came from.
	rec.AppendEvent(restart.Event{Time: s.now(), Type: restart.EventCreated,
		Message: fmt.Sprintf("Restart of job %q created by schedule %s for its occurrence due %s: %d allocation(s) in %d batch(es)",
			rec.JobID, sc.ID, due.UTC().Format(time.RFC3339), len(rec.Allocs), rec.Batches)})
	err = s.a.eng.Create(ctx, rec)
	var busy *store.JobBusyError
	switch {
	case err == nil:
		return started, nil
	case errors.As(err, &busy) && busy.RestartID == id:
		return started, nil
	case errors.As(err, &busy):
		return schedule.Outcome{Result: schedule.ResultSkipped, RestartID: busy.RestartID,
			Reason: fmt.Sprintf("job %q had restart %s in progress", sc.JobID, busy.RestartID)}, nil
	}
	// A collision with the same occurrence created by another agent meanwhile: the
	// record is there.
	if _, gerr := st.Get(ctx, sc.Namespace, id); gerr == nil {
		return started, nil
	}
	if ctx.Err() != nil {
		return schedule.Outcome{}, ctx.Err()
	}
	return schedule.Outcome{}, fmt.Errorf("creating the occurrence's restart %s: %w", id, err)
}

// clockRate converts waits on the agent's clock to real waits. The clock is time.Now in
// production, but a simulation's clock may run faster than real time; a wait that ends
// early on a slower clock simply waits again for the rest, so an estimate is enough.
type clockRate struct {
	now       func() time.Time
	realStart time.Time
	clockZero time.Time
}

func newClockRate(now func() time.Time) clockRate {
	return clockRate{now: now, realStart: time.Now(), clockZero: now()}
}

// realWait is how long to wait in real time for d to pass on the clock.
func (r clockRate) realWait(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	realElapsed := time.Since(r.realStart)
	clockElapsed := r.now().Sub(r.clockZero)
	if realElapsed > 10*time.Millisecond && clockElapsed > realElapsed*11/10 {
		rate := float64(clockElapsed) / float64(realElapsed)
		d = time.Duration(float64(d) / rate)
	}
	if realElapsed < time.Second {
		// The rate is not known yet: wait no longer than the agent has run, so that a
		// fast clock is noticed within its first second (a few extra wakes, then none).
		d = min(d, max(realElapsed, 10*time.Millisecond))
	}
	return max(d, time.Millisecond)
}
