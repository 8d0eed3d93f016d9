package agent

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// simClock runs the agents on the simulation's clock, so that a cron of simulated seconds
// fires every few real milliseconds.
func simClock(e *env) func(*Config) {
	return func(c *Config) { c.Now = e.Sim.Now }
}

func scheduleSpec() restart.Spec {
	return restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, OnError: restart.OnErrorFail, Health: restart.HealthRunning}
}

func (e *env) schedules() *schedule.Store { return schedule.NewStore(e.Vars, "") }

// Two agents over one cluster and an -every schedule firing every 4 simulated seconds:
// every occurrence is accounted for exactly once (started, skipped while the job's restart
// runs, or missed), each started one has exactly one restart record, under its
// occurrence's ID, and no two records share a due time.
func TestScheduleEveryAcrossReplicasStartsEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "cron", 1, nil)
	ctx := agenttest.Context(t)

	const spec = "*/4 * * * * * *"
	c, err := schedule.ParseCron(spec, "", e.Sim.Now())
	if err != nil {
		t.Fatal(err)
	}
	first, _ := c.Next(e.Sim.Now().Add(2 * time.Second))
	sc := &schedule.Schedule{JobID: "cron", Cron: spec, Next: first, Grace: 5 * time.Minute}
	sc.SetSpec(scheduleSpec())
	if err := e.schedules().Create(ctx, sc); err != nil {
		t.Fatal(err)
	}

	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e))
	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), simClock(e))
	stop1, stop2 := agenttest.Run(t, a1), agenttest.Run(t, a2)

	var cur atomic.Pointer[schedule.Schedule]
	simtest.WaitFor(t, ctx, "3 started occurrences and 12 handled", func() bool {
		s, err := e.schedules().Get(ctx, "default", sc.ID)
		if err != nil {
			return false
		}
		cur.Store(s)
		return s.Started >= 3 && s.Started+s.Skipped+s.Failed+s.Missed >= 12
	})
	stop1()
	stop2()

	final, err := e.schedules().Get(ctx, "default", sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Every occurrence from the first to the one before Next is accounted for once (one
	// may still be pending: claimed when the agents stopped).
	want := 0
	for t0 := first; t0.Before(final.Next); t0, _ = c.Next(t0) {
		want++
	}
	pending := 0
	if final.Pending != nil {
		pending = 1
	}
	if got := final.Started + final.Skipped + final.Failed + final.Missed + pending; got != want {
		t.Errorf("started %d + skipped %d + failed %d + missed %d + pending %d = %d; %d occurrences were due",
			final.Started, final.Skipped, final.Failed, final.Missed, pending, got, want)
	}
	if final.Failed != 0 {
		t.Errorf("%d occurrences failed: %s", final.Failed, final.LastReason)
	}

	recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "cron"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != final.Started && len(recs) != final.Started+pending {
		var have []string
		for _, r := range recs {
			have = append(have, r.ID)
		}
		t.Errorf("%d restart records for %d started occurrences: records %v; history %+v; pending %+v",
			len(recs), final.Started, have, final.History, final.Pending)
	}
	// Each record is an occurrence's: its ID derives from a due time of the cron.
	ids := map[string]time.Time{}
	for t0 := first; t0.Before(final.Next); t0, _ = c.Next(t0) {
		ids[schedule.OccurrenceID(sc.ID, t0)] = t0
	}
	perDue := map[time.Time]int{}
	for _, r := range recs {
		due, ok := ids[r.ID]
		if !ok {
			t.Errorf("restart %s is no occurrence of the schedule", r.ID)
		}
		perDue[due]++
	}
	for due, n := range perDue {
		if n != 1 {
			t.Errorf("occurrence due %s has %d restarts", due, n)
		}
	}
	for _, o := range final.History {
		if o.Result == schedule.ResultStarted && ids[o.RestartID] != o.Due {
			t.Errorf("history entry %+v names a restart of another due time", o)
		}
	}
	started := testutil.ToFloat64(a1.Metrics().scheduleMetrics().occurrences.WithLabelValues("started")) +
		testutil.ToFloat64(a2.Metrics().scheduleMetrics().occurrences.WithLabelValues("started"))
	if int(started) != final.Started {
		t.Errorf("the agents counted %v started occurrences; the schedule %d", started, final.Started)
	}
	t.Logf("%d occurrences: started %d, skipped %d, missed %d; %d records", want, final.Started, final.Skipped, final.Missed, len(recs))
}

// Occurrences whose due time passed more than the grace while no agent ran are reported as
// missed (schedule, metric) and not run; the cron's next occurrence is scheduled normally
// and an -at schedule ends.
func TestScheduleMissedWhileNoAgentRan(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "late", 1, nil)
	ctx := agenttest.Context(t)
	now := e.Sim.Now()

	at := &schedule.Schedule{JobID: "late", At: now.Add(-10 * time.Minute), Next: now.Add(-10 * time.Minute), Grace: 5 * time.Minute}
	at.SetSpec(scheduleSpec())
	// A daily cron whose last occurrence was about 12 hours ago (the hour is chosen so).
	spec := "0 " + itoa((now.UTC().Hour()+12)%24) + " * * *"
	c, err := schedule.ParseCron(spec, "", now)
	if err != nil {
		t.Fatal(err)
	}
	prev, _ := c.Next(now.Add(-24 * time.Hour))
	daily := &schedule.Schedule{JobID: "late", Cron: spec, Next: prev, Grace: 5 * time.Minute}
	daily.SetSpec(scheduleSpec())
	for _, s := range []*schedule.Schedule{at, daily} {
		if err := e.schedules().Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e))
	agenttest.Run(t, a)
	var gotAt, gotDaily *schedule.Schedule
	// The metric is counted once a claim is recorded: wait for both.
	simtest.WaitFor(t, ctx, "both schedules to record the missed occurrences", func() bool {
		gotAt, _ = e.schedules().Get(ctx, "default", at.ID)
		gotDaily, _ = e.schedules().Get(ctx, "default", daily.ID)
		return gotAt != nil && gotDaily != nil && gotAt.Missed > 0 && gotDaily.Missed > 0 &&
			testutil.ToFloat64(a.Metrics().scheduleMetrics().missed) >= 2
	})
	if gotAt.Status != schedule.StatusDone || gotAt.Missed != 1 || gotAt.Started != 0 || !gotAt.LastMissed.Equal(at.At) {
		t.Errorf("-at schedule: %+v", gotAt)
	}
	next, _ := c.Next(prev)
	if gotDaily.Status != schedule.StatusActive || gotDaily.Missed != 1 || gotDaily.Started != 0 || !gotDaily.Next.Equal(next) {
		t.Errorf("daily schedule: status %s missed %d started %d next %v (want %v)", gotDaily.Status, gotDaily.Missed, gotDaily.Started, gotDaily.Next, next)
	}
	if len(gotDaily.History) != 1 || gotDaily.History[0].Result != schedule.ResultMissed || gotDaily.MissedReason == "" {
		t.Errorf("daily schedule's report: %+v, reason %q", gotDaily.History, gotDaily.MissedReason)
	}
	if got := testutil.ToFloat64(a.Metrics().scheduleMetrics().missed); got != 2 {
		t.Errorf("nomad_restart_schedule_missed_total = %v, want 2", got)
	}
	recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "late"})
	if err != nil || len(recs) != 0 {
		t.Errorf("missed occurrences ran: %d restarts, %v", len(recs), err)
	}
}

// An agent that claimed an occurrence and died, before or after creating its restart:
// another agent finishes the claim once it is older than pendingTakeover, with exactly one
// restart for the occurrence, even though its due time is past the grace now.
func TestScheduleFinishesTheClaimOfADeadAgent(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "created", 1, nil)
	e.Register(t, "default", "claimed", 1, nil)
	ctx := agenttest.Context(t)
	due := e.Sim.Now().Add(-10 * time.Minute)
	claim := func(job string) *schedule.Schedule {
		sc := &schedule.Schedule{JobID: job, At: due, Next: due, Grace: 5 * time.Minute, Status: schedule.StatusActive}
		sc.SetSpec(scheduleSpec())
		step, err := sc.Plan(due) // the dead agent's view: on time
		if err != nil || step.Run.IsZero() {
			t.Fatalf("plan at the due time: %+v %v", step, err)
		}
		sc.ID = "" // Create picks the ID; the claim is made after
		if err := e.schedules().Create(ctx, sc); err != nil {
			t.Fatal(err)
		}
		sc.Claim(step, "dead-agent", due)
		if err := e.schedules().Update(ctx, sc); err != nil {
			t.Fatal(err)
		}
		return sc
	}
	created, claimed := claim("created"), claim("claimed")
	// For one, the dead agent had created the occurrence's restart too.
	p, err := e.Planner.Plan(ctx, engineRequest("created", created.RestartSpec()))
	if err != nil {
		t.Fatal(err)
	}
	p.Record.ID = created.Pending.RestartID
	if err := e.Planner.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}

	agenttest.Run(t, e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e)))
	for _, sc := range []*schedule.Schedule{created, claimed} {
		var got *schedule.Schedule
		simtest.WaitFor(t, ctx, "schedule of "+sc.JobID+" to record its occurrence", func() bool {
			got, _ = e.schedules().Get(ctx, "default", sc.ID)
			return got != nil && got.Status == schedule.StatusDone
		})
		want := schedule.OccurrenceID(sc.ID, due)
		if got.Started != 1 || got.Missed != 0 || got.LastRestartID != want || got.Pending != nil {
			t.Errorf("%s: started %d missed %d restart %s (want %s) pending %+v", sc.JobID, got.Started, got.Missed, got.LastRestartID, want, got.Pending)
		}
		rec, err := e.Store.Get(ctx, "default", want)
		if err != nil {
			t.Fatalf("%s: the occurrence's restart: %v", sc.JobID, err)
		}
		if final := e.WaitEnd(t, rec); final.Status != restart.StatusSucceeded {
			t.Errorf("%s: the occurrence's restart ended %s (%s)", sc.JobID, final.Status, final.Reason)
		}
		recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: sc.JobID})
		if err != nil || len(recs) != 1 {
			t.Errorf("%s: %d restarts, %v; want one", sc.JobID, len(recs), err)
		}
	}
}

func engineRequest(job string, spec restart.Spec) engine.Request {
	return engine.Request{Namespace: "default", Job: job, Spec: spec}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The shipped policies cover schedules: an operator with deploy/operator-policy.hcl stores
// one, an agent with deploy/agent-policy.hcl starts its occurrence with no request denied.
func TestScheduleShippedPoliciesSuffice(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.Register(t, "default", "nightly", 1, nil)
	ctx := agenttest.Context(t)
	opClient := e.shippedClient(t, "operator")
	due := e.Sim.Now().Add(10 * time.Second) // simulated: a fraction of a real second
	sc := &schedule.Schedule{JobID: "nightly", At: due, Next: due, Grace: 5 * time.Minute}
	sc.SetSpec(scheduleSpec())
	if err := agenttest.NomadParts(opClient).Schedules.Create(ctx, sc); err != nil {
		t.Fatalf("storing a schedule with the operator policy: %v", err)
	}
	agentToken := e.ShippedToken(t, "agent")
	a := e.newAgent(t, "agent", agentToken, simClock(e))
	agenttest.Run(t, a)
	var got *schedule.Schedule
	simtest.WaitFor(t, ctx, "the occurrence to be recorded", func() bool {
		got, _ = e.schedules().Get(ctx, "default", sc.ID)
		return got != nil && got.Status == schedule.StatusDone
	})
	if got.Started != 1 {
		t.Fatalf("schedule: %+v", got)
	}
	rec, err := e.Store.Get(ctx, "default", got.LastRestartID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) == 0 || rec.Events[0].Type != restart.EventCreated || !strings.Contains(rec.Events[0].Message, "created by schedule "+sc.ID) {
		t.Errorf("the restart's first event does not name the schedule: %+v", rec.Events)
	}
	if final := e.WaitEnd(t, rec); final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	if n := testutil.ToFloat64(a.metrics.apiErrors.WithLabelValues("403")); n != 0 {
		t.Errorf("the agent policy let %v requests be denied", n)
	}
}

// An occurrence due while the job has a restart in progress is recorded as skipped, naming
// that restart, and not queued: no second restart appears.
func TestScheduleSkipsWhileTheJobHasARestart(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "busy", 2, nil)
	ctx := agenttest.Context(t)
	// A restart that waits for an answer after its first batch: in progress until answered.
	held := e.Detached(t, "default", "busy", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true, OnError: restart.OnErrorFail})
	due := e.Sim.Now().Add(10 * time.Second)
	sc := &schedule.Schedule{JobID: "busy", At: due, Next: due, Grace: 5 * time.Minute}
	sc.SetSpec(scheduleSpec())
	if err := e.schedules().Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), simClock(e))
	agenttest.Run(t, a)
	var got *schedule.Schedule
	simtest.WaitFor(t, ctx, "the occurrence to be recorded", func() bool {
		got, _ = e.schedules().Get(ctx, "default", sc.ID)
		return got != nil && got.Status == schedule.StatusDone
	})
	if got.Skipped != 1 || got.Started != 0 || got.LastResult != schedule.ResultSkipped || got.LastRestartID != held.ID ||
		!strings.Contains(got.LastReason, held.ID) {
		t.Fatalf("schedule: skipped %d started %d last %s %s (%s); want skipped naming %s", got.Skipped, got.Started, got.LastResult, got.LastRestartID, got.LastReason, held.ID)
	}
	recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "busy"})
	if err != nil || len(recs) != 1 || recs[0].ID != held.ID {
		t.Fatalf("restarts of the job: %d, %v; want only the one in progress", len(recs), err)
	}
	if n := testutil.ToFloat64(a.Metrics().scheduleMetrics().occurrences.WithLabelValues("skipped")); n != 1 {
		t.Errorf("skipped occurrences counted: %v", n)
	}
}

// realWait turns a wait on the agent's clock into a real wait: unchanged for a real clock,
// divided by the rate for a clock that runs faster, and capped by the time run so far while
// the rate is not known yet.
func TestClockRateRealWait(t *testing.T) {
	realStart := time.Now().Add(-2 * time.Second)
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		elapsed   time.Duration // of the clock, over the 2 real seconds
		realStart time.Time
		in, want  time.Duration
		tolerance time.Duration
	}{
		{"real clock", 2 * time.Second, realStart, time.Minute, time.Minute, 100 * time.Millisecond},
		{"50 times faster", 100 * time.Second, realStart, 50 * time.Second, time.Second, 100 * time.Millisecond},
		{"due already", 2 * time.Second, realStart, -time.Second, 0, 0},
		{"just started: capped", 0, time.Now(), time.Hour, 10 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := func() time.Time { return base.Add(tc.elapsed) }
			r := clockRate{now: now, realStart: tc.realStart, clockZero: base}
			got := r.realWait(tc.in)
			if d := got - tc.want; d > tc.tolerance || d < -tc.tolerance {
				t.Fatalf("realWait(%v) = %v, want %v ± %v", tc.in, got, tc.want, tc.tolerance)
			}
		})
	}
}
