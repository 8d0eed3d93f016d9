package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// fleetSchedule stores a fleet schedule of the jobs filter selects in the default
// namespace, due once at due, as `run -jobs '<filter>' -at <due>` does.
func (e *env) fleetSchedule(t *testing.T, filter string, parallel int, due time.Time) *schedule.Schedule {
	t.Helper()
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.OnError = parallel, restart.OnErrorFail
	sc := &schedule.Schedule{At: due, Next: due, Grace: time.Hour,
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "default", Filter: filter}, Options: opts}}
	sc.SetSpec(restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}})
	if err := e.schedules().Create(agenttest.Context(t), sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// waitScheduleDone waits until the -at schedule recorded its occurrence.
func (e *env) waitScheduleDone(t *testing.T, sc *schedule.Schedule) *schedule.Schedule {
	t.Helper()
	ctx := agenttest.Context(t)
	var got *schedule.Schedule
	simtest.WaitFor(t, ctx, "schedule "+agenttest.Short(sc.ID)+" to record its occurrence", func() bool {
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
	e := startEnv(t, nomadsim.Options{})
	e.RegisterJobs(t, "default", "sf", 3, 2, nil)
	e.Register(t, "default", "other", 1, nil) // not selected: never restarted
	due := e.Sim.Now().Add(20 * time.Second)  // simulated: well under a real second
	sc := e.fleetSchedule(t, `Name matches "^sf-"`, 2, due)

	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e))
	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), simClock(e))
	agenttest.Run(t, a1)
	agenttest.Run(t, a2)
	got := e.waitScheduleDone(t, sc)

	id := schedule.OccurrenceID(sc.ID, due)
	if got.Started != 1 || got.Skipped+got.Failed+got.Missed != 0 || got.LastResult != schedule.ResultStarted || got.LastRestartID != id {
		t.Fatalf("schedule: started %d skipped %d failed %d missed %d, last %s %s (%s); want one started fleet %s",
			got.Started, got.Skipped, got.Failed, got.Missed, got.LastResult, got.LastRestartID, got.LastReason, id)
	}
	ctx := agenttest.Context(t)
	fleets, err := e.Fleets.List(ctx, "*", false)
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

	e.fleetDone(t, rec, 2, "")
	if w, err := simtest.RestartWindow(agenttest.Context(t), e.Client, "default", "other"); err != nil || !w.From.IsZero() {
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
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 1, nil)
	due := e.Sim.Now().Add(10 * time.Second)
	none := e.fleetSchedule(t, `Name == "nothing"`, 1, due)
	bad := e.fleetSchedule(t, `Name ==== "web"`, 1, due)
	elsewhere := e.fleetSchedule(t, `Name == "web"`, 1, due)
	ctx := agenttest.Context(t)
	if _, err := e.schedules().Mutate(ctx, "default", elsewhere.ID, func(sc *schedule.Schedule) (bool, error) {
		sc.Fleet.Selection.Namespace = "prod" // its fleets would live in prod, not here
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	agenttest.Run(t, e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e)))
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
	if fleets, err := e.Fleets.List(ctx, "*", false); err != nil || len(fleets) != 0 {
		t.Errorf("fleets: %d, %v; want none", len(fleets), err)
	}
}

// An -every fleet schedule whose fleet outlasts the interval: the occurrences due while it
// runs are skipped, naming it, and no two of the schedule's fleets ever run at once.
func TestScheduleFleetSkipsWhileItsPreviousFleetRuns(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.RegisterJobs(t, "default", "slow", 2, 2, agenttest.SlowStart) // each allocation takes 20 simulated seconds to run again
	const spec = "*/10 * * * * * *"
	c, err := schedule.ParseCron(spec, "", e.Sim.Now())
	if err != nil {
		t.Fatal(err)
	}
	first, _ := c.Next(e.Sim.Now().Add(2 * time.Second))
	sc := e.fleetSchedule(t, `Name matches "^slow-"`, 1, first)
	ctx := agenttest.Context(t)
	if _, err := e.schedules().Mutate(ctx, "default", sc.ID, func(s *schedule.Schedule) (bool, error) {
		s.At, s.Cron = time.Time{}, spec // every 10 simulated seconds, from first
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	stop := agenttest.Run(t, e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e)))
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
	agenttest.Run(t, e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), simClock(e)))
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
	fleets, err := e.Fleets.List(ctx, "*", false)
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]*fleet.Record{}
	for _, rec := range fleets {
		ended[rec.ID] = e.WaitFleetEnd(t, rec)
		if len(fleets) == 1 { // the overlap of jobs' restarts is told from Nomad's facts of one fleet
			e.CheckFleet(t, ended[rec.ID], 1)
		} else if ended[rec.ID].Status != restart.StatusSucceeded {
			t.Errorf("fleet %s ended %s (%s)", agenttest.Short(rec.ID), ended[rec.ID].Status, ended[rec.ID].Reason)
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
				t.Errorf("fleet %s was created at %s while fleet %s ran (until %s)", agenttest.Short(b.ID), b.CreateTime, agenttest.Short(a.ID), a.EndTime)
			}
		}
	}
}

// A fleet that outlasts two occurrences keeps the third from starting too: an occurrence
// skipped for the fleet still running passes that fleet on (LastRestartID), and the next
// one is skipped while it runs, then started once it ended.
func TestScheduleFleetSkippedOccurrencePassesItsFleetOn(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	ctx := agenttest.Context(t)
	sel := fleet.Selection{Namespace: "default", Filter: `Name matches "^none-"`}
	running := fleetrun.NewRecord(uuid.NewString(), "default", sel, restart.Spec{}, fleet.DefaultOptions(),
		[]fleet.Job{{Namespace: "default", JobID: "none-0", Status: fleet.JobRunning, RestartID: uuid.NewString()}}, nil, "", time.Now())
	running.Status = restart.StatusRunning
	if err := e.Fleets.Create(ctx, running); err != nil {
		t.Fatal(err)
	}
	r := &scheduleRunner{}
	for _, last := range []schedule.Result{schedule.ResultStarted, schedule.ResultSkipped} {
		sc := &schedule.Schedule{Namespace: "default", LastResult: last, LastRestartID: running.ID}
		out, skip, err := r.previousFleetRuns(ctx, e.Fleets, sc)
		if err != nil || !skip || out.Result != schedule.ResultSkipped || out.RestartID != running.ID {
			t.Errorf("after an occurrence %s for fleet %s still running: %+v, skip %v, %v; want skipped naming it", last, agenttest.Short(running.ID), out, skip, err)
		}
	}
	if _, err := store.Mutate(ctx, e.Fleets, "default", running.ID, func(f *fleet.Record) error {
		f.Status = restart.StatusSucceeded
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sc := &schedule.Schedule{Namespace: "default", LastResult: schedule.ResultSkipped, LastRestartID: running.ID}
	if _, skip, err := r.previousFleetRuns(ctx, e.Fleets, sc); err != nil || skip {
		t.Errorf("after the fleet ended: skip %v, %v; want the occurrence to start", skip, err)
	}
}

// defaultOnlyWriter may write nomad-restart's variables in namespace default and nothing
// else: whoever may file fleets and schedules there, but has no say over namespace prod.
const defaultOnlyWriter = `
namespace "default" {
  capabilities = ["list-jobs", "read-job"]
  variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } }
}`

// startConsentEnv is an env with ACLs, namespace prod, and a client whose token holds
// defaultOnlyWriter.
func startConsentEnv(t *testing.T) (*env, *api.Client) {
	t.Helper()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	if _, err := e.Client.Namespaces().Register(&api.Namespace{Name: "prod"}, nil); err != nil {
		t.Fatal(err)
	}
	return e, simtest.ClientAs(t, e.Sim, simtest.Token(t, e.Sim, "default-writer", defaultOnlyWriter))
}

// checkNotRestarted asserts, from Nomad's task events, that no allocation of the job was
// restarted or replaced.
func (e *env) checkNotRestarted(t *testing.T, ns, job string) {
	t.Helper()
	counts, err := simtest.CountRestarts(agenttest.Context(t), e.Client, ns, job)
	if err != nil || len(counts.InPlace) != 0 || len(counts.Replaced) != 0 {
		t.Errorf("job %s of namespace %s was restarted: %v (%v)", job, ns, counts, err)
	}
}

// A fleet record written by hand in default, with a token that may write variables there
// only, lists a job of prod beside one of default. The agent (deploy/agent-policy.hcl, which
// may restart anything) restarts default's job, fails prod's naming the missing member
// marker and the fix, and restarts no allocation of prod nor files a restart there.
func TestFleetWithoutMemberMarkerLeavesOtherNamespaceAlone(t *testing.T) {
	t.Parallel()
	e, writer := startConsentEnv(t)
	e.Register(t, "default", "home-web", 1, nil)
	e.Register(t, "prod", "prod-db", 2, nil)

	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.MaxFailedJobs, opts.OnError = 2, 1, restart.OnErrorFail
	spec := restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}}
	jobs := []fleet.Job{
		{Namespace: "default", JobID: "home-web", Type: "service", Priority: 50, Status: fleet.JobPending},
		{Namespace: "prod", JobID: "prod-db", Type: "service", Priority: 50, Status: fleet.JobPending},
	}
	sel := fleet.Selection{Namespace: "*", Filter: `Name matches "-"`}
	rec := fleetrun.NewRecord(uuid.NewString(), "default", sel, spec, opts, jobs, nil, e.Client.Address(), time.Now())
	if err := agenttest.NomadParts(writer).Fleets.Create(agenttest.Context(t), rec); err != nil {
		t.Fatalf("the default-only writer files the fleet: %v", err)
	}

	agenttest.Run(t, e.newAgent(t, "agent", e.ShippedToken(t, "agent"), nil))
	final := e.WaitFleetEnd(t, rec)
	for _, j := range final.Jobs {
		t.Logf("job %s/%s: %s (%s)", j.Namespace, j.JobID, j.Status, j.Reason)
		switch j.Namespace {
		case "default":
			if j.Status != fleet.JobSucceeded {
				t.Errorf("the home namespace's job %s ended %s, want succeeded", j.JobID, j.Status)
			}
		case "prod":
			marker := "nomad-restart/~fleets/" + rec.ID + "/member"
			if j.Status != fleet.JobFailed || j.RestartID != "" || strings.Contains(j.Reason, "\n") ||
				!strings.Contains(j.Reason, marker) || !strings.Contains(j.Reason, `namespace "prod" holds no member marker`) ||
				!strings.Contains(j.Reason, `token that may write nomad-restart variables in namespace "prod"`) {
				t.Errorf("prod's job ended %s with restart %q and reason %q; want failed, no restart, one line naming %s and the fix", j.Status, j.RestartID, j.Reason, marker)
			}
		}
	}
	e.checkNotRestarted(t, "prod", "prod-db")
	if recs, err := e.Store.List(agenttest.Context(t), store.Filter{Namespace: "prod"}); err != nil || len(recs) != 0 {
		t.Errorf("restarts filed in prod: %d (%v)", len(recs), err)
	}
}

// consentSchedule stores, with client's token, a fleet schedule in default selecting jobs of
// every namespace by filter, due once at due.
func (e *env) consentSchedule(t *testing.T, client *api.Client, filter string, due time.Time) *schedule.Schedule {
	t.Helper()
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.OnError = 2, restart.OnErrorFail
	sc := &schedule.Schedule{At: due, Next: due, Grace: time.Hour, Namespace: "default",
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "*", Filter: filter}, Options: opts}}
	sc.SetSpec(restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}})
	if err := agenttest.NomadParts(client).Schedules.Create(agenttest.Context(t), sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// Two '*' fleet schedules in default: one stored by a token with rights in default only
// (no member marker in prod), one whose creator also wrote its marker in prod. At their
// occurrence the agent restarts only default's job of the first, saying in the fleet's
// first event that prod was left out and why, and both jobs of the second.
func TestScheduleFleetKeepsOnlyConsentingNamespaces(t *testing.T) {
	t.Parallel()
	e, writer := startConsentEnv(t)
	for _, ns := range []string{"default", "prod"} {
		e.Register(t, ns, "a-"+ns, 1, nil)
		e.Register(t, ns, "b-"+ns, 1, nil)
	}
	due := e.Sim.Now().Add(20 * time.Second)
	weak := e.consentSchedule(t, writer, `Name matches "^a-"`, due)
	full := e.consentSchedule(t, e.Client, `Name matches "^b-"`, due)
	if err := e.schedules().PutMember(agenttest.Context(t), "prod", full.ID, schedule.MemberOf(full)); err != nil {
		t.Fatal(err)
	}
	if err := agenttest.NomadParts(writer).Schedules.PutMember(agenttest.Context(t), "prod", weak.ID, schedule.MemberOf(weak)); err == nil {
		t.Fatal("the default-only writer wrote a schedule's member marker in prod")
	}

	agenttest.Run(t, e.newAgent(t, "agent", e.ShippedToken(t, "agent"), simClock(e)))
	for _, tc := range []struct {
		sc   *schedule.Schedule
		want []string
	}{{weak, []string{"a-default"}}, {full, []string{"b-default", "b-prod"}}} {
		got := e.waitScheduleDone(t, tc.sc)
		if got.LastResult != schedule.ResultStarted {
			t.Fatalf("schedule %s: %s (%s), want a started fleet", agenttest.Short(tc.sc.ID), got.LastResult, got.LastReason)
		}
		rec, err := e.Fleets.Get(agenttest.Context(t), "default", got.LastRestartID)
		if err != nil {
			t.Fatal(err)
		}
		final := e.WaitFleetEnd(t, rec)
		var ids []string
		for _, j := range final.Jobs {
			ids = append(ids, j.JobID)
		}
		if strings.Join(ids, ",") != strings.Join(tc.want, ",") || final.Status != restart.StatusSucceeded {
			t.Errorf("schedule %s's fleet restarted %v and ended %s; want %v, succeeded", agenttest.Short(tc.sc.ID), ids, final.Status, tc.want)
		}
		first := final.Events[0].Message
		t.Logf("schedule %s's fleet: %s", agenttest.Short(tc.sc.ID), first)
		leftOut := strings.Contains(first, `left out the jobs of namespace "prod"`) && strings.Contains(first, "no member marker")
		if leftOut != (tc.sc == weak) {
			t.Errorf("schedule %s's fleet's first event says prod was left out: %v, want %v", agenttest.Short(tc.sc.ID), leftOut, tc.sc == weak)
		}
		if tc.sc == full {
			if _, err := e.Fleets.Member(agenttest.Context(t), "prod", rec.ID); err != nil {
				t.Errorf("the agent did not write the fleet's member marker in prod: %v", err)
			}
		}
	}
	e.checkNotRestarted(t, "prod", "a-prod")
	counts, err := simtest.CountRestarts(agenttest.Context(t), e.Client, "prod", "b-prod")
	if err != nil || len(counts.InPlace)+len(counts.Replaced) != 1 {
		t.Errorf("b-prod, whose namespace consented, restarts: %v (%v), want one", counts, err)
	}
}
