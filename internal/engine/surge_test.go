package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// fakeScaler is a fake cluster with the job scale endpoint: one group "web" whose count and
// JobModifyIndex it keeps, honouring the check-and-set as Nomad does; errs are answered to
// the next scale requests first; deps are the latest deployments answered in turn (the last
// repeats).
type fakeScaler struct {
	*fakeCluster
	mu    sync.Mutex
	count int
	jmi   uint64
	calls []int
	errs  []error
	deps  []*cluster.DeploymentState
}

func newFakeScaler(count int) *fakeScaler {
	return &fakeScaler{fakeCluster: newFakeCluster("service", map[string]int{"web": 1}), count: count, jmi: 100}
}

func (f *fakeScaler) JobScale(ctx context.Context, ns, jobID string) (*restart.JobScale, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &restart.JobScale{ID: jobID, Type: "service", JobModifyIndex: f.jmi, Groups: map[string]restart.GroupScale{"web": {Count: f.count}}}, nil
}

func (f *fakeScaler) ScaleGroup(ctx context.Context, ns, jobID, group string, count int, jmi uint64, msg string) (*cluster.ScaleResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, count)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	if jmi != 0 && jmi != f.jmi {
		return nil, fmt.Errorf("scaling: %w", cluster.ErrScaleConflict)
	}
	f.count = count
	f.jmi++
	return &cluster.ScaleResult{JobModifyIndex: f.jmi}, nil
}

func (f *fakeScaler) FailDeployment(ctx context.Context, ns, id string) error { return nil }

func (f *fakeScaler) LatestDeployment(ctx context.Context, ns, jobID string, after uint64) (*cluster.DeploymentState, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.deps) == 0 {
		return nil, after + 1, nil
	}
	d := f.deps[0]
	if len(f.deps) > 1 {
		f.deps = f.deps[1:]
	}
	return d, after + 1, nil
}

// surgeDriver is a driver of a stored record with the given surge state, on sc.
func surgeDriver(t *testing.T, sc cluster.Cluster, g restart.SurgeGroup) (*driver, *restart.Record) {
	t.Helper()
	e, s := newTestEngine(t, sc)
	rec := &restart.Record{ID: "surge-test-0000", Namespace: "default", JobID: "web", JobType: "service", Status: restart.StatusRunning,
		Spec: restart.Spec{Surge: g.To - g.From, HealthyDeadline: time.Second, Health: restart.HealthRunning}, Surge: []restart.SurgeGroup{g},
		Allocs: []restart.AllocProgress{{ID: "a1", Group: "web", Batch: 1, State: restart.AllocDone}}, Batches: 1}
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Get(context.Background(), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return &driver{e: e, ns: rec.Namespace, id: rec.ID, rec: stored, changed: make(chan struct{}, 1), spec: normalizeSpec(stored.Spec),
		jobNS: "default", jobID: "web", jobType: "service", log: e.log}, stored
}

// TestSurgeDownDecisions: at the end of a restart the group is scaled back exactly when the
// facts say the count is this restart's, once, and left alone otherwise.
func TestSurgeDownDecisions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		phase     restart.SurgePhase
		scaled    uint64 // ScaledIndex
		count     int    // the group's count in Nomad now
		errs      []error
		wantCalls []int
		wantPhase restart.SurgePhase
		wantNote  string
		wantCount int
	}{
		{"up: scaled back once", restart.SurgeUp, 100, 2, nil, []int{1}, restart.SurgeDown, "", 1},
		{"scale-down intent, request lost: sent once", restart.SurgeScalingDown, 0, 2, nil, []int{1}, restart.SurgeDown, "", 1},
		{"scale-down took effect before the crash", restart.SurgeScalingDown, 0, 1, nil, nil, restart.SurgeDown, "", 1},
		{"scale-up never took effect", restart.SurgeScalingUp, 0, 1, nil, nil, restart.SurgeDown, "", 1},
		{"operator scaled above", restart.SurgeUp, 100, 3, nil, nil, restart.SurgeLeft, "someone else", 3},
		{"operator scaled below the target", restart.SurgeUp, 100, 0, nil, nil, restart.SurgeLeft, "someone else", 0},
		{"operator scaled back already", restart.SurgeUp, 100, 1, nil, nil, restart.SurgeDown, "already", 1},
		{"permission denied", restart.SurgeUp, 100, 2, []error{cluster.ErrPermissionDenied}, []int{1}, restart.SurgeLeft, "nomad job scale -namespace default web web 1", 2},
		{"conflict: the facts decide, sent again once", restart.SurgeUp, 100, 2, []error{cluster.ErrScaleConflict}, []int{1, 1}, restart.SurgeDown, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeScaler(tc.count)
			fs.errs = tc.errs
			g := restart.SurgeGroup{Group: "web", From: 1, To: 2, Phase: tc.phase, JobModifyIndex: 100, ScaledIndex: tc.scaled}
			d, _ := surgeDriver(t, fs, g)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			if err := d.surgeDown(ctx); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(fs.calls) != fmt.Sprint(tc.wantCalls) {
				t.Errorf("scale requests %v, want %v", fs.calls, tc.wantCalls)
			}
			stored, err := d.e.store.Get(ctx, d.ns, d.id)
			if err != nil {
				t.Fatal(err)
			}
			got := stored.Surge[0]
			if got.Phase != tc.wantPhase || !strings.Contains(got.Note, tc.wantNote) {
				t.Errorf("stored surge %+v, want phase %s and a note with %q", got, tc.wantPhase, tc.wantNote)
			}
			if fs.count != tc.wantCount {
				t.Errorf("count %d, want %d", fs.count, tc.wantCount)
			}
			// Idempotent: a second pass (a resumed finish) sends nothing more.
			before := len(fs.calls)
			if err := d.surgeDown(ctx); err != nil || len(fs.calls) != before {
				t.Errorf("second surgeDown: %v, %d more requests", err, len(fs.calls)-before)
			}
		})
	}
}

// TestSurgeDeploymentWait: the wait for the scale's deployment ends with it when it
// succeeds, fails when it fails, ignores older deployments, and gives up at its deadline.
func TestSurgeDeploymentWait(t *testing.T) {
	dep := func(status string, idx uint64) *cluster.DeploymentState {
		return &cluster.DeploymentState{ID: "dep-" + status, Status: status, StatusDescription: "desc", JobSpecModifyIndex: idx}
	}
	for _, tc := range []struct {
		name  string
		since uint64
		deps  []*cluster.DeploymentState
		want  string // "" for success
	}{
		{"older deployment, then ours runs and succeeds", 101, []*cluster.DeploymentState{dep("successful", 90), dep("running", 101), dep("successful", 101)}, ""},
		{"ours fails", 101, []*cluster.DeploymentState{dep("running", 101), dep("failed", 101)}, "is failed: desc"},
		{"none expected and none", 0, nil, ""},
		{"any active one ends", 0, []*cluster.DeploymentState{dep("running", 5), dep("cancelled", 5)}, ""},
		{"ours never appears", 101, []*cluster.DeploymentState{dep("successful", 90)}, "did not end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeScaler(2)
			fs.deps = tc.deps
			d, _ := surgeDriver(t, fs, restart.SurgeGroup{Group: "web", From: 1, To: 2, Phase: restart.SurgeScalingUp})
			err := d.awaitDeploymentEnd(context.Background(), tc.since, 50*time.Millisecond)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

// TestSurgeAllocs picks the group's live allocations created since the intent that the
// restart does not handle, newest first.
func TestSurgeAllocs(t *testing.T) {
	g := restart.SurgeGroup{Group: "web", From: 1, To: 3, JobModifyIndex: 50}
	run := func(id, group string, create uint64, desired, client string) *restart.Alloc {
		return &restart.Alloc{ID: id, Group: group, CreateIndex: create, DesiredStatus: desired, ClientStatus: client}
	}
	allocs := []*restart.Alloc{
		run("planned", "web", 60, "run", "running"),
		run("replacement", "web", 70, "run", "running"),
		run("old", "web", 10, "run", "running"),
		run("other-group", "api", 80, "run", "running"),
		run("stopped", "web", 90, "stop", "complete"),
		run("failed", "web", 91, "run", "failed"),
		run("surge-1", "web", 55, "run", "pending"),
		run("surge-2", "web", 95, "run", "running"),
	}
	planned := map[string]bool{"planned": true, "replacement": true}
	var ids []string
	for _, a := range surgeAllocs(allocs, g, planned) {
		ids = append(ids, a.ID)
	}
	if fmt.Sprint(ids) != "[surge-2 surge-1]" {
		t.Fatalf("surge allocations %v, want [surge-2 surge-1]", ids)
	}
}

// TestSetSurgeCopiesOnWrite: a change never writes into the slice a stored snapshot holds.
func TestSetSurgeCopiesOnWrite(t *testing.T) {
	r := &restart.Record{Surge: []restart.SurgeGroup{{Group: "web", Phase: restart.SurgeScalingUp}}}
	snap := cloneRecord(r)
	setSurgeLocked(r, restart.SurgeGroup{Group: "web", Phase: restart.SurgeUp})
	setSurgeLocked(r, restart.SurgeGroup{Group: "api", Phase: restart.SurgeScalingUp})
	if snap.Surge[0].Phase != restart.SurgeScalingUp || len(snap.Surge) != 1 {
		t.Fatalf("snapshot changed: %+v", snap.Surge)
	}
	if len(r.Surge) != 2 || r.Surge[0].Phase != restart.SurgeUp || r.Surge[1].Group != "api" {
		t.Fatalf("record %+v", r.Surge)
	}
}

// TestSurgeUpWithoutScaler: a cluster that cannot scale fails the restart before anything
// changes.
func TestSurgeUpWithoutScaler(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 1})
	d, _ := surgeDriver(t, fc, restart.SurgeGroup{})
	d.rec.Surge, d.spec.Surge = nil, 1
	ok, err := d.surgeUp(context.Background(), 1)
	if ok || err != nil {
		t.Fatalf("surgeUp: %v %v, want the restart ended", ok, err)
	}
	if d.rec.Status != restart.StatusFailed || !strings.Contains(d.rec.Reason, "scale endpoint") {
		t.Fatalf("status %s %q", d.rec.Status, d.rec.Reason)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("canceled")
	}
}

// surgeJob is a service job of one group "web" of count allocations, with a Nomad-native
// check scripted as given and an update block: each scale makes a deployment, as on Nomad.
func surgeJob(count int, script string) *api.Job {
	return checkedJob("web", count, script, "", time.Second, 20*time.Second)
}

// startSurgeSim is a gate simulation (startGateSim) running surgeJob(count, script).
func startSurgeSim(t testing.TB, count int, script string) *simEnv {
	t.Helper()
	env := startGateSim(t, "")
	env.registerJob(t, surgeJob(count, script))
	return env
}

// surgeSpec is -health checks with the gate's times given as flags (the job has no update
// block to take them from).
func surgeSpec(s restart.Spec) restart.Spec {
	s.Health = restart.HealthChecks
	s.MinHealthyTime, s.MinHealthyTimeGiven = time.Second, true
	s.HealthyDeadline, s.HealthyDeadlineGiven = 20*time.Second, true
	s.Yes, s.OnError = true, restart.OnErrorFail
	return s
}

// serving counts the group's allocations that serve now (desired run, running, every task
// running), from Nomad's API.
func serving(t testing.TB, client *api.Client) int {
	t.Helper()
	stubs, _, err := client.Jobs().Allocations("web", true, nil)
	if err != nil {
		t.Error(err)
		return -1
	}
	n := 0
	for _, s := range stubs {
		if s.DesiredStatus != api.AllocDesiredStatusRun || s.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		ok := len(s.TaskStates) > 0
		for _, ts := range s.TaskStates {
			ok = ok && ts.State == "running"
		}
		if ok {
			n++
		}
	}
	return n
}

// sampler records the fewest serving allocations seen while it runs.
type sampler struct {
	mu      sync.Mutex
	min     int
	samples int
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func startSampler(t testing.TB, client *api.Client) *sampler {
	s := &sampler{min: 1 << 30, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			n := serving(t, client)
			s.mu.Lock()
			s.min = min(s.min, n)
			s.samples++
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) finish() (minServing, samples int) {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.min, s.samples
}

// scaleEvents are the group's scaling events, newest first, as Nomad reports them.
func scaleEvents(t testing.TB, client *api.Client) []api.ScalingEvent {
	t.Helper()
	st, _, err := client.Jobs().ScaleStatus("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	return st.TaskGroups["web"].Events
}

func groupCount(t testing.TB, client *api.Client) int {
	t.Helper()
	j, _, err := client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	return *j.TaskGroups[0].Count
}

// checkSurgeEvents: exactly one scale-up and one scale-down by this restart.
func checkSurgeEvents(t *testing.T, client *api.Client, rec *restart.Record, from, to int) {
	t.Helper()
	var up, down int
	for _, ev := range scaleEvents(t, client) {
		switch {
		case ev.Message == surgeMessage(rec.ID, true) && ev.Count != nil && int(*ev.Count) == to:
			up++
		case ev.Message == surgeMessage(rec.ID, false) && ev.Count != nil && int(*ev.Count) == from:
			down++
		default:
			t.Errorf("unexpected scaling event %q count %v", ev.Message, ev.Count)
		}
	}
	if up != 1 || down != 1 {
		t.Errorf("%d scale-ups and %d scale-downs, want one each", up, down)
	}
}

// TestSurgeCountOneStaysUp: a count-1 group restarted with -surge 1 -batch-size 1 keeps at
// least one allocation serving throughout (sampled from Nomad's API); its allocation is
// restarted exactly once; the count is back to 1 at the end and the record and events show
// the surge's steps.
func TestSurgeCountOneStaysUp(t *testing.T) {
	env := startSurgeSim(t, 1, "pass_after=2s")
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1, BatchSizes: []restart.BatchSize{{N: 1}}}))
	smp := startSampler(t, env.client)
	defer smp.finish()
	final, dt := env.driveGate(t, rec)
	minServing, samples := smp.finish()
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
	}
	if minServing < 1 || samples < 10 {
		t.Errorf("fewest serving allocations %d over %d samples, want at least 1", minServing, samples)
	}
	env.checkOnce(t, final)
	if len(final.Allocs) != 1 {
		t.Fatalf("%d planned allocations, want 1 (surge allocations are not restarted)", len(final.Allocs))
	}
	if c := groupCount(t, env.client); c != 1 {
		t.Errorf("count %d after the restart, want 1", c)
	}
	if serving(t, env.client) != 1 {
		t.Errorf("%d allocations serve after the restart, want 1 (the surge's stopped)", serving(t, env.client))
	}
	// Nomad stops the highest name index on a scale-down: the surge's, not the restarted one.
	if a, _, err := env.client.Allocations().Info(final.Allocs[0].ID, nil); err != nil || a.DesiredStatus != api.AllocDesiredStatusRun {
		t.Errorf("the restarted allocation after the scale-down: %v %v, want still desired to run", a, err)
	}
	if len(final.Surge) != 1 {
		t.Fatalf("surge record %+v, want one group", final.Surge)
	}
	if g := final.Surge[0]; g.Group != "web" || g.From != 1 || g.To != 2 || g.Phase != restart.SurgeDown || g.UpTime.IsZero() || g.DownTime.IsZero() {
		t.Errorf("surge record %+v, want web 1->2, down, with times", g)
	}
	msgs := dt.log.messages()
	for _, want := range []string{`Scaling group "web" from 1 to 2 for the restart`, `Surge allocations of group "web" are healthy`, `Scaling group "web" back to 1`} {
		if !strings.Contains(msgs, want) {
			t.Errorf("no event %q in:\n%s", want, msgs)
		}
	}
	// The surge was healthy before the first batch started, and scaled back after the last.
	up, batch, down := strings.Index(msgs, "are healthy"), strings.Index(msgs, "Restarting 1st batch"), strings.Index(msgs, "back to 1")
	if up < 0 || batch < up || down < batch {
		t.Errorf("surge steps out of order (healthy %d, batch %d, down %d):\n%s", up, batch, down, msgs)
	}
	checkSurgeEvents(t, env.client, final, 1, 2)
}

// TestSurgeCrashCampaign: drivers stopped at random instants (scale-up intent persisted,
// scale-up sent, waiting, scaling down) and resumed from new Engines: each scale request
// reaches Nomad once, every planned allocation is restarted once, the count is restored.
func TestSurgeCrashCampaign(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 5))
	for run := 0; run < 2; run++ {
		env := startSurgeSim(t, 2, "pass")
		rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1, BatchSizes: []restart.BatchSize{{N: 1}}}))
		for round := 0; ; round++ {
			if round > 200 {
				t.Fatal("no end after 200 resumptions")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(30+10*round))*time.Millisecond)
			e := env.gateEngine(env.store, "crash")
			final, err := e.Drive(ctx, rec.Namespace, rec.ID, nil)
			cancel()
			if err == nil && final.Status.Terminal() {
				if final.Status != restart.StatusSucceeded {
					t.Fatalf("status %s (%s)", final.Status, final.Reason)
				}
				t.Logf("run %d: done after %d interruptions", run, round)
				env.checkOnce(t, final)
				checkSurgeEvents(t, env.client, final, 2, 3)
				if c := groupCount(t, env.client); c != 2 {
					t.Errorf("count %d, want 2 restored", c)
				}
				if g := final.Surge[0]; g.Phase != restart.SurgeDown {
					t.Errorf("surge %+v, want down", g)
				}
				break
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrLeaseHeld) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// TestSurgeRestoredOnFailure: surge allocations whose check never passes fail the restart at
// the healthy deadline, before any planned allocation is touched; the count is restored.
func TestSurgeRestoredOnFailure(t *testing.T) {
	env := startSurgeSim(t, 1, "pass")
	env.sim.ScriptCheck("default", "web", "ready-nomad", "fail")
	spec := surgeSpec(restart.Spec{Surge: 1})
	spec.HealthyDeadline = 4 * time.Second
	rec := env.plan(t, "web", spec)
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusFailed || !strings.Contains(final.Reason, "surge") {
		t.Fatalf("status %s (%s), want failed by the surge\n%s", final.Status, final.Reason, dt.log.messages())
	}
	if a := final.Allocs[0]; a.State != restart.AllocPending {
		t.Errorf("planned allocation %s, want untouched", a.State)
	}
	if c := groupCount(t, env.client); c != 1 {
		t.Errorf("count %d, want 1 restored", c)
	}
	if g := final.Surge[0]; g.Phase != restart.SurgeDown {
		t.Errorf("surge %+v, want down", g)
	}
	// The scale-up's deployment could never succeed; Nomad refuses to scale during it, so
	// the restart failed it (its own, and only its own) to scale back.
	failedDep := false
	for _, ev := range final.Events {
		failedDep = failedDep || strings.HasPrefix(ev.Message, "Failed deployment")
	}
	if !failedDep {
		t.Errorf("no event says the surge's deployment was failed:\n%s", dt.log.messages())
	}
	checkSurgeEvents(t, env.client, final, 1, 2)
}

// TestSurgeRestoredOnCancel: a cancel while the surge allocations are still being waited
// for ends the restart canceled with the count restored.
func TestSurgeRestoredOnCancel(t *testing.T) {
	env := startSurgeSim(t, 1, "pass")
	env.sim.ScriptCheck("default", "web", "ready-nomad", "pass_after=2m")
	spec := surgeSpec(restart.Spec{Surge: 1})
	spec.HealthyDeadline = 5 * time.Minute // 15s of real time: the cancel comes first
	rec := env.plan(t, "web", spec)
	wait, cancel := driveAsync(env.e, rec)
	defer cancel()
	waitStatus(t, env.store, rec, func(r *restart.Record) bool {
		return len(r.Surge) == 1 && r.Surge[0].ScaledIndex != 0
	})
	if _, err := env.e.Cancel(context.Background(), rec.Namespace, rec.ID, "test"); err != nil {
		t.Fatal(err)
	}
	final := waitEnded(t, wait, restart.StatusCanceled)
	if c := groupCount(t, env.client); c != 1 {
		t.Errorf("count %d, want 1 restored", c)
	}
	if a := final.Allocs[0]; a.State != restart.AllocPending {
		t.Errorf("planned allocation %s, want untouched", a.State)
	}
	checkSurgeEvents(t, env.client, final, 1, 2)
}

// TestSurgeCountChangedByOperator: an operator who scales the group during the restart owns
// its count: the restart does not scale it back, and says so.
func TestSurgeCountChangedByOperator(t *testing.T) {
	env := startSurgeSim(t, 2, "pass")
	// A batch wait after the first batch leaves the operator time to scale.
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1, BatchSizes: []restart.BatchSize{{N: 1}}, BatchWait: time.Second}))
	wait, cancel := driveAsync(env.e, rec)
	defer cancel()
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.DecidedBatch == 1 })
	if _, _, err := env.client.Jobs().Scale("web", "web", ptr(4), "operator", false, nil, nil); err != nil {
		t.Fatal(err)
	}
	final := waitEnded(t, wait, restart.StatusSucceeded)
	if c := groupCount(t, env.client); c != 4 {
		t.Errorf("count %d, want the operator's 4 left as is", c)
	}
	if g := final.Surge[0]; g.Phase != restart.SurgeLeft || !strings.Contains(g.Note, "someone else") {
		t.Errorf("surge %+v, want left with a note", g)
	}
}

// TestCheckSurgeRefusals: a scaling policy is refused unless -surge-ignore-scaling; a batch
// job is refused; a cluster client that cannot scale is refused.
func TestCheckSurgeRefusals(t *testing.T) {
	env := startGateSim(t, "")
	job := surgeJob(1, "pass")
	job.TaskGroups[0].Scaling = &api.ScalingPolicy{Min: ptr(int64(1)), Max: ptr(int64(5)), Policy: map[string]any{}}
	env.registerJob(t, job)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	plan := func(spec restart.Spec) *Plan {
		p, err := env.e.Plan(ctx, Request{Job: "web", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := env.sim.Stats()
	err := env.e.CheckSurge(ctx, plan(restart.Spec{Health: restart.HealthRunning, Surge: 1}))
	if err == nil || !strings.Contains(err.Error(), "scaling policy") || !strings.Contains(err.Error(), "-surge-ignore-scaling") {
		t.Errorf("scaling policy: %v, want a refusal naming -surge-ignore-scaling", err)
	}
	if err := env.e.CheckSurge(ctx, plan(restart.Spec{Health: restart.HealthRunning, Surge: 1, SurgeIgnoreScaling: true})); err != nil {
		t.Errorf("with -surge-ignore-scaling: %v", err)
	}
	if err := env.e.CheckSurge(ctx, plan(restart.Spec{Health: restart.HealthRunning, Surge: 5, SurgeIgnoreScaling: true})); err == nil || !strings.Contains(err.Error(), "max") {
		t.Errorf("past the policy's max: %v, want a refusal", err)
	}
	if after := env.sim.Stats(); after.Mutations != before.Mutations {
		t.Errorf("checks changed the cluster: %d mutations", after.Mutations-before.Mutations)
	}

	env2 := startSim(t, false)
	env2.register(t, "batchy", "batch", map[string]int{"web": 1})
	p, err := env2.e.Plan(ctx, Request{Job: "batchy", Spec: restart.Spec{Surge: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env2.e.CheckSurge(ctx, p); err == nil || !strings.Contains(err.Error(), "service jobs only") {
		t.Errorf("batch job: %v, want a refusal", err)
	}
}

// TestSurgeCrashPoints: a driver stopped right after the scale-up intent is persisted (its
// request not sent), right after the surge is up, and right after the scale-down intent is
// persisted, then resumed from a new Engine each time: one scale-up and one scale-down reach
// Nomad, the planned allocation is restarted once, the count is restored.
func TestSurgeCrashPoints(t *testing.T) {
	env := startSurgeSim(t, 1, "pass")
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1}))
	points := []string{`Scaling group "web" from 1 to 2`, `Surge allocations of group "web" are healthy`, `Scaling group "web" back to 1`}
	var final *restart.Record
	for round := 0; ; round++ {
		if round > len(points) {
			t.Fatalf("still %s after %d crashes", final.Status, len(points))
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		var log eventLog
		sink := func(e restart.Event) {
			log.sink(e)
			if round < len(points) && strings.Contains(e.Message, points[round]) {
				cancel() // the event is persisted: the driver dies before its next step
			}
		}
		e := env.gateEngine(env.store, "crash")
		var err error
		final, err = e.Drive(ctx, rec.Namespace, rec.ID, sink)
		cancel()
		if round < len(points) {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: Drive %v, want stopped at %q\n%s", round, err, points[round], log.messages())
			}
			continue
		}
		if err != nil || final.Status != restart.StatusSucceeded {
			t.Fatalf("final %v %v\n%s", final.Status, err, log.messages())
		}
		break
	}
	env.checkOnce(t, final)
	checkSurgeEvents(t, env.client, final, 1, 2)
	if c := groupCount(t, env.client); c != 1 {
		t.Errorf("count %d, want 1 restored", c)
	}
}

// TestSurgeWithoutScalePermission: a token without scale-job fails the restart with one
// line naming the capability, before anything changed in the cluster.
func TestSurgeWithoutScalePermission(t *testing.T) {
	env := startGateSimAs(t, `namespace "default" { capabilities = ["read-job", "list-jobs", "alloc-lifecycle"] }`)
	mgmt := env.client
	env.registerJob(t, surgeJob(1, ""))
	rec := env.plan(t, "web", restart.Spec{Health: restart.HealthRunning, Yes: true, OnError: restart.OnErrorFail, Surge: 1})
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusFailed || !strings.Contains(final.Reason, "scale-job") || strings.Contains(final.Reason, "\n") {
		t.Fatalf("status %s %q, want failed in one line naming scale-job\n%s", final.Status, final.Reason, dt.log.messages())
	}
	if final.Allocs[0].State != restart.AllocPending {
		t.Errorf("planned allocation %s, want untouched", final.Allocs[0].State)
	}
	if c := groupCount(t, mgmt); c != 1 || len(scaleEvents(t, mgmt)) != 0 {
		t.Errorf("count %d with %d scaling events, want 1 and none", c, len(scaleEvents(t, mgmt)))
	}
	if g := final.Surge[0]; g.Phase != restart.SurgeDown {
		t.Errorf("surge %+v, want down (never scaled)", g)
	}
}
