package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// fleetSchedule stores a fleet schedule of the jobs filter selects in the default
// namespace, due once at due, as `run -jobs '<filter>' -at <due>` does.
func (e *fleetEnv) fleetSchedule(t *testing.T, filter string, parallel int, due time.Time) *schedule.Schedule {
	t.Helper()
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.OnError = parallel, restart.OnErrorFail
	sc := &schedule.Schedule{At: due, Next: due, Grace: time.Hour,
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "default", Filter: filter}, Options: opts}}
	sc.SetSpec(restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}})
	if err := e.schedules().Create(testContext(t), sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// waitScheduleDone waits until the -at schedule recorded its occurrence.
func (e *fleetEnv) waitScheduleDone(t *testing.T, sc *schedule.Schedule) *schedule.Schedule {
	t.Helper()
	ctx := testContext(t)
	var got *schedule.Schedule
	simtest.WaitFor(t, ctx, "schedule "+short(sc.ID)+" to record its occurrence", func() bool {
		got, _ = e.schedules().Get(ctx, sc.Namespace, sc.ID)
		return got != nil && got.Status == schedule.StatusDone
	})
	return got
}

// A fleet schedule due a moment ahead, with two agents running: at its due time one fleet
// is created, under the occurrence's ID, and driven to success with each allocation
// restarted exactly once and never more jobs at once than -max-parallel-jobs (Nomad's
// facts); the schedule names the fleet it started.
func TestScheduleFleetAtStartsOneFleetAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "sf", 3, 2, nil)
	e.register(t, "default", "other", 1, nil) // not selected: never restarted
	due := e.sim.Now().Add(20 * time.Second)  // simulated: well under a real second
	sc := e.fleetSchedule(t, `Name matches "^sf-"`, 2, due)

	a1 := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), simClock(e.env))
	a2 := e.newAgent(t, "agent-2", e.sim.BootstrapToken(), simClock(e.env))
	start(t, a1)
	start(t, a2)
	got := e.waitScheduleDone(t, sc)

	id := schedule.OccurrenceID(sc.ID, due)
	if got.Started != 1 || got.Skipped+got.Failed+got.Missed != 0 || got.LastResult != schedule.ResultStarted || got.LastRestartID != id {
		t.Fatalf("schedule: started %d skipped %d failed %d missed %d, last %s %s (%s); want one started fleet %s",
			got.Started, got.Skipped, got.Failed, got.Missed, got.LastResult, got.LastRestartID, got.LastReason, id)
	}
	ctx := testContext(t)
	fleets, err := e.fleets.List(ctx, "*", false)
	if err != nil || len(fleets) != 1 || fleets[0].ID != id {
		t.Fatalf("fleets after the occurrence: %d, %v; want one, %s", len(fleets), err, id)
	}
	rec := fleets[0]
	if rec.CreateTime.Before(due) {
		t.Errorf("fleet created at %s, before its due time %s", rec.CreateTime, due)
	}
	if len(rec.Events) == 0 || !strings.Contains(rec.Events[0].Message, "created by schedule "+sc.ID) {
		t.Errorf("the fleet's first event does not name the schedule: %+v", rec.Events)
	}
	if len(rec.Jobs) != 3 || rec.Selection != sc.Fleet.Selection || rec.Options.MaxParallelJobs != 2 {
		t.Errorf("fleet selected %d jobs by %+v with %+v; want the 3 sf- jobs, at most 2 at once", len(rec.Jobs), rec.Selection, rec.Options)
	}

	final := e.waitFleetEnd(t, rec)
	e.checkFleet(t, final, 2)
	if n := fleetStarts(final); n != 1 {
		t.Errorf("fleet started %d times, want once: %v", n, final.Events)
	}
	if w, err := simtest.RestartWindow(testContext(t), e.client, "default", "other"); err != nil || !w.From.IsZero() {
		t.Errorf("job other, not selected, was restarted at %s (%v)", w.From, err)
	}
	started := testutil.ToFloat64(a1.Metrics().scheduleMetrics().occurrences.WithLabelValues("started")) +
		testutil.ToFloat64(a2.Metrics().scheduleMetrics().occurrences.WithLabelValues("started"))
	if started != 1 {
		t.Errorf("the agents counted %v started occurrences, want 1", started)
	}
}

// An occurrence whose selection matches no job is skipped with the reason; one whose
// filter Nomad refuses fails with Nomad's reason; a fleet schedule stored outside the home
// namespace of its selection fails without listing anything. None creates a fleet.
func TestScheduleFleetSelectionOutcomes(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.register(t, "default", "web", 1, nil)
	due := e.sim.Now().Add(10 * time.Second)
	none := e.fleetSchedule(t, `Name == "nothing"`, 1, due)
	bad := e.fleetSchedule(t, `Name ==== "web"`, 1, due)
	elsewhere := e.fleetSchedule(t, `Name == "web"`, 1, due)
	ctx := testContext(t)
	if _, err := e.schedules().Mutate(ctx, "default", elsewhere.ID, func(sc *schedule.Schedule) (bool, error) {
		sc.Fleet.Selection.Namespace = "prod" // its fleets would live in prod, not here
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	start(t, e.newAgent(t, "agent-1", e.sim.BootstrapToken(), simClock(e.env)))
	for _, tc := range []struct {
		sc     *schedule.Schedule
		result schedule.Result
		reason string
	}{
		{none, schedule.ResultSkipped, "selected no job"},
		{bad, schedule.ResultFailed, "filter expression"},
		{elsewhere, schedule.ResultFailed, `selects jobs of namespace "prod"`},
	} {
		got := e.waitScheduleDone(t, tc.sc)
		if got.LastResult != tc.result || !strings.Contains(got.LastReason, tc.reason) || got.LastRestartID != "" || got.Started != 0 {
			t.Errorf("schedule of %q: %s (%s), restart %q; want %s saying %q",
				tc.sc.Fleet.Selection.Filter, got.LastResult, got.LastReason, got.LastRestartID, tc.result, tc.reason)
		}
	}
	if fleets, err := e.fleets.List(ctx, "*", false); err != nil || len(fleets) != 0 {
		t.Errorf("fleets: %d, %v; want none", len(fleets), err)
	}
}

// An -every fleet schedule whose fleet outlasts the interval: the occurrences due while it
// runs are skipped, naming it, and no two of the schedule's fleets ever run at once.
func TestScheduleFleetSkipsWhileItsPreviousFleetRuns(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "slow", 2, 2, slowStart) // each allocation takes 20 simulated seconds to run again
	const spec = "*/10 * * * * * *"
	c, err := schedule.ParseCron(spec, "", e.sim.Now())
	if err != nil {
		t.Fatal(err)
	}
	first, _ := c.Next(e.sim.Now().Add(2 * time.Second))
	sc := e.fleetSchedule(t, `Name matches "^slow-"`, 1, first)
	ctx := testContext(t)
	if _, err := e.schedules().Mutate(ctx, "default", sc.ID, func(s *schedule.Schedule) (bool, error) {
		s.At, s.Cron = time.Time{}, spec // every 10 simulated seconds, from first
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	stop := start(t, e.newAgent(t, "agent-1", e.sim.BootstrapToken(), simClock(e.env)))
	var got *schedule.Schedule
	simtest.WaitFor(t, ctx, "an occurrence skipped after one started", func() bool {
		got, _ = e.schedules().Get(ctx, "default", sc.ID)
		return got != nil && got.Started >= 1 && got.Skipped >= 1
	})
	for { // no more occurrences: remove the schedule as it is now
		err := e.schedules().Delete(ctx, got)
		if err == nil {
			break
		}
		if !errors.Is(err, schedule.ErrConflict) {
			t.Fatal(err)
		}
		if got, err = e.schedules().Get(ctx, "default", sc.ID); err != nil {
			t.Fatal(err)
		}
	}
	// An occurrence the agent claimed before the schedule was deleted may still file its
	// fleet: stop the agent so that the fleets listed below are all there will be, then let
	// another agent drive them to their end.
	stop()
	start(t, e.newAgent(t, "agent-2", e.sim.BootstrapToken(), simClock(e.env)))
	// The first occurrence the agent handled starts a fleet named after its due time (on a
	// loaded machine the agent may come up after the very first one was due: that one is
	// missed, as TestScheduleMissedWhileNoAgentRan covers).
	var firstStarted *schedule.Occurrence
	for i, o := range got.History {
		if o.Result == schedule.ResultStarted {
			firstStarted = &got.History[i]
			break
		}
		if o.Result != schedule.ResultMissed {
			t.Fatalf("history %+v: an occurrence before the first start was %s", got.History, o.Result)
		}
	}
	if firstStarted == nil || firstStarted.RestartID != schedule.OccurrenceID(sc.ID, firstStarted.Due) {
		t.Fatalf("history %+v; want the first occurrence handled to start the fleet of its due time", got.History)
	}
	fleets, err := e.fleets.List(ctx, "*", false)
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]*fleet.Record{}
	for _, rec := range fleets {
		ended[rec.ID] = e.waitFleetEnd(t, rec)
		if len(fleets) == 1 { // the overlap of jobs' restarts is told from Nomad's facts of one fleet
			e.checkFleet(t, ended[rec.ID], 1)
		} else if ended[rec.ID].Status != restart.StatusSucceeded {
			t.Errorf("fleet %s ended %s (%s)", short(rec.ID), ended[rec.ID].Status, ended[rec.ID].Reason)
		}
	}
	for _, o := range got.History {
		if o.Result != schedule.ResultSkipped {
			continue
		}
		prev := ended[o.RestartID]
		if prev == nil || !strings.Contains(o.Reason, o.RestartID) || !o.Due.Before(prev.EndTime) {
			t.Errorf("skipped occurrence %+v does not name a fleet of the schedule still running at its due time", o)
		}
	}
	for _, a := range ended {
		for _, b := range ended {
			if a.ID != b.ID && a.CreateTime.Before(b.CreateTime) && b.CreateTime.Before(a.EndTime) {
				t.Errorf("fleet %s was created at %s while fleet %s ran (until %s)", short(b.ID), b.CreateTime, short(a.ID), a.EndTime)
			}
		}
	}
}

// A fleet that outlasts two occurrences keeps the third from starting too: an occurrence
// skipped for the fleet still running passes that fleet on (LastRestartID), and the next
// one is skipped while it runs, then started once it ended.
func TestScheduleFleetSkippedOccurrencePassesItsFleetOn(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	ctx := testContext(t)
	sel := fleet.Selection{Namespace: "default", Filter: `Name matches "^none-"`}
	running := fleetrun.NewRecord(uuid.NewString(), "default", sel, restart.Spec{}, fleet.DefaultOptions(),
		[]fleet.Job{{Namespace: "default", JobID: "none-0", Status: fleet.JobRunning, RestartID: uuid.NewString()}}, "", time.Now())
	running.Status = restart.StatusRunning
	if err := e.fleets.Create(ctx, running); err != nil {
		t.Fatal(err)
	}
	r := &scheduleRunner{}
	for _, last := range []schedule.Result{schedule.ResultStarted, schedule.ResultSkipped} {
		sc := &schedule.Schedule{Namespace: "default", LastResult: last, LastRestartID: running.ID}
		out, skip, err := r.previousFleetRuns(ctx, e.fleets, sc)
		if err != nil || !skip || out.Result != schedule.ResultSkipped || out.RestartID != running.ID {
			t.Errorf("after an occurrence %s for fleet %s still running: %+v, skip %v, %v; want skipped naming it", last, short(running.ID), out, skip, err)
		}
	}
	if _, err := store.Mutate(ctx, e.fleets, "default", running.ID, func(f *fleet.Record) error {
		f.Status = restart.StatusSucceeded
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sc := &schedule.Schedule{Namespace: "default", LastResult: schedule.ResultSkipped, LastRestartID: running.ID}
	if _, skip, err := r.previousFleetRuns(ctx, e.fleets, sc); err != nil || skip {
		t.Errorf("after the fleet ended: skip %v, %v; want the occurrence to start", skip, err)
	}
}
