package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// surgeJob is a service job of one group "web" of count allocations, with a Nomad-native
// check scripted as given and an update block: each scale makes a deployment, as on Nomad.
func surgeJob(count int, script string) *api.Job {
	return checkedJob("web", count, script, "", time.Second, 20*time.Second)
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
	env := startGateSim(t, "")
	env.registerJob(t, surgeJob(1, "pass_after=2s"))
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
		env := startGateSim(t, "")
		env.registerJob(t, surgeJob(2, "pass"))
		rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1, BatchSizes: []restart.BatchSize{{N: 1}}}))
		for round := 0; ; round++ {
			if round > 200 {
				t.Fatal("no end after 200 resumptions")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(30+10*round))*time.Millisecond)
			e := New(Config{Cluster: cluster.NewNomad(env.client), Store: env.store, Holder: "crash", Health: HealthConfig{
				Clock: env.sim.Now, TimeScale: gateScale, Consul: health.ConsulConfig{Address: env.sim.ConsulAddr(), Wait: time.Second}}})
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
	env := startGateSim(t, "")
	env.registerJob(t, surgeJob(1, "pass"))
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
	env := startGateSim(t, "")
	env.registerJob(t, surgeJob(1, "pass"))
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
	final, err := wait()
	if err != nil || final.Status != restart.StatusCanceled {
		t.Fatalf("after cancel: %v %v", final, err)
	}
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
	env := startGateSim(t, "")
	env.registerJob(t, surgeJob(2, "pass"))
	// A batch wait after the first batch leaves the operator time to scale.
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1, BatchSizes: []restart.BatchSize{{N: 1}}, BatchWait: time.Second}))
	wait, cancel := driveAsync(env.e, rec)
	defer cancel()
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.DecidedBatch == 1 })
	if _, _, err := env.client.Jobs().Scale("web", "web", ptr(4), "operator", false, nil, nil); err != nil {
		t.Fatal(err)
	}
	final, err := wait()
	if err != nil || final.Status != restart.StatusSucceeded {
		t.Fatalf("final %v %v", final, err)
	}
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
	env := startGateSim(t, "")
	env.registerJob(t, surgeJob(1, "pass"))
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
		e := New(Config{Cluster: cluster.NewNomad(env.client), Store: env.store, Holder: "crash", Health: HealthConfig{
			Clock: env.sim.Now, TimeScale: gateScale, Consul: health.ConsulConfig{Address: env.sim.ConsulAddr(), Wait: time.Second}}})
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim, err := nomadsim.Start(ctx, nomadsim.Options{TimeScale: gateScale, Seed: 3, ACLs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Close() }()
	mgmt, err := sim.APIClient(sim.BootstrapToken())
	if err != nil {
		t.Fatal(err)
	}
	token, err := sim.CreateToken("operator", map[string]string{"operator": `namespace "default" { capabilities = ["read-job", "list-jobs", "alloc-lifecycle"] }`})
	if err != nil {
		t.Fatal(err)
	}
	client, err := sim.APIClient(token)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &simEnv{sim: sim, client: mgmt, store: s,
		e: New(Config{Cluster: cluster.NewNomad(client), Store: s, Holder: "acl:1", Health: HealthConfig{Clock: sim.Now, TimeScale: gateScale}})}
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
