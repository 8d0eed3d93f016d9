package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// simEnv is an engine wired to a simulated Nomad over real HTTP.
type simEnv struct {
	sim    *nomadsim.Cluster
	client *api.Client
	e      *Engine
	store  store.Store
}

func startSim(t testing.TB, nomadStore bool) *simEnv {
	t.Helper()
	sim := simtest.Start(t, nomadsim.Options{Seed: 1})
	client := simtest.Client(t, sim)
	var s store.Store
	if nomadStore {
		s = nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	} else {
		s = localStore(t)
	}
	e := New(Config{Cluster: cluster.NewNomad(client), Store: s, Holder: "e2e:1", Health: HealthConfig{TimeScale: sim.TimeScale()}})
	return &simEnv{sim: sim, client: client, e: e, store: s}
}

func ptr[T any](v T) *T { return &v }

// register runs a job with the given groups (name -> count), each with the tasks named, and
// waits until it runs.
func (env *simEnv) register(t testing.TB, id, typ string, groups map[string]int, tasks ...string) {
	t.Helper()
	if len(tasks) == 0 {
		tasks = []string{"main"}
	}
	job := &api.Job{ID: ptr(id), Name: ptr(id), Type: ptr(typ), Datacenters: []string{"dc1", "dc2"}, Region: ptr("global")}
	for name, n := range groups {
		tg := api.NewTaskGroup(name, n)
		for _, tn := range tasks {
			task := api.NewTask(tn, "raw_exec")
			task.Config = map[string]any{"command": "/bin/sh"}
			if typ == "batch" {
				// A batch task that finished cannot be restarted (Nomad's client refuses it):
				// keep it running for the test.
				task.Meta = map[string]string{"nomadsim.run_for": "1h"}
			}
			task.Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(16)})
			tg.AddTask(task)
		}
		job.AddTaskGroup(tg)
	}
	env.registerJob(t, job)
}

// registerJob runs job and waits until it runs and its deployment ended: a restart is
// refused while the job's deployment runs, as Nomad refuses it (test code; the engine
// itself never polls).
func (env *simEnv) registerJob(t testing.TB, job *api.Job) {
	t.Helper()
	simtest.RegisterRunning(t, env.sim, job)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	nc := cluster.NewNomad(env.client)
	for {
		d, err := nc.ActiveDeployment(ctx, "default", *job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("deployment %s of job %s still %s", d.ID, *job.ID, d.Status)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// planned is the engine's plan of a restart of job with spec, and a context of testTimeout
// for filing it.
func (env *simEnv) planned(t testing.TB, job string, spec restart.Spec) (context.Context, *restart.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	p, err := env.e.Plan(ctx, Request{Job: job, Spec: spec})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return ctx, p.Record
}

// plan plans a restart of job and creates it (Create).
func (env *simEnv) plan(t testing.TB, job string, spec restart.Spec) *restart.Record {
	t.Helper()
	ctx, rec := env.planned(t, job, spec)
	if err := env.e.Create(ctx, rec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return rec
}

// checkOnce asserts from Nomad's facts that each planned allocation was restarted once.
func (env *simEnv) checkOnce(t *testing.T, rec *restart.Record) {
	t.Helper()
	var ids []string
	for _, a := range rec.Allocs {
		ids = append(ids, a.ID)
	}
	simtest.CheckOnce(t, env.client, rec.Namespace, rec.JobID, ids, rec.Spec.Reschedule, testTimeout)
}

func TestE2EInPlaceAndReschedule(t *testing.T) {
	cases := []struct {
		name       string
		nomadStore bool
		typ        string
		spec       restart.Spec
		allocs     int
	}{
		{"in place, local store", false, "service", restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true}, 5},
		{"in place, nomad store, 50%", true, "service", restart.Spec{BatchSizes: []restart.BatchSize{{N: 50, Percent: true}}, Yes: true}, 5},
		{"reschedule", false, "service", restart.Spec{Reschedule: true, BatchSizes: []restart.BatchSize{{N: 3}}, Yes: true}, 5},
		{"reschedule system", false, "system", restart.Spec{Reschedule: true, Yes: true}, 4},
		{"group", false, "service", restart.Spec{Groups: []string{"api"}, Yes: true}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := startSim(t, tc.nomadStore)
			groups := map[string]int{"api": 3, "web": 2}
			if tc.typ == "system" {
				groups = map[string]int{"agent": 1}
			}
			env.register(t, "web", tc.typ, groups)
			rec := env.plan(t, "we", tc.spec)
			if len(rec.Allocs) != tc.allocs {
				t.Fatalf("planned %d allocations, want %d", len(rec.Allocs), tc.allocs)
			}
			var l eventLog
			final := drive(t, env.e, rec, &l)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, l.messages())
			}
			if final.Driver != "" {
				t.Errorf("an ended restart still names its driver %q", final.Driver)
			}
			env.checkOnce(t, final)
		})
	}
}

func TestE2EOnErrorFail(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 3})
	// The restarted task fails to start again, as often as the restart policy retries.
	env.sim.FailTaskStarts("default", "web", "main", 100)
	final := drive(t, env.e, env.plan(t, "web", restart.Spec{OnError: restart.OnErrorFail, HealthyDeadline: time.Minute}), nil)
	if final.Status != restart.StatusFailed {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	touched := 0
	for _, a := range final.Allocs {
		if a.State != restart.AllocPending {
			touched++
		}
	}
	if touched != 1 {
		t.Fatalf("%d allocations touched, want 1 (on-error fail)", touched)
	}
}

// TestE2ECrashCampaign cancels the driver at random instants and resumes it with a new
// engine (a new process would do the same from the record): every allocation must be restarted
// exactly once, judged from Nomad's task events and replacement allocations.
func TestE2ECrashCampaign(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, tc := range []struct {
		typ        string
		reschedule bool
		groups     map[string]int
	}{
		{"service", false, map[string]int{"web": 4}},
		{"service", true, map[string]int{"web": 4}},
		{"batch", false, map[string]int{"web": 3}},
		{"system", true, map[string]int{"web": 1}},
	} {
		reschedule := tc.reschedule
		env := startSim(t, false)
		env.register(t, "web", tc.typ, tc.groups)
		rec := env.plan(t, "web", restart.Spec{Reschedule: reschedule, BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true})
		for round := 0; ; round++ {
			if round > 150 {
				t.Fatal("no end after 150 resumptions")
			}
			// Random instants, in a window that widens so that a slow machine still ends.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(40+10*round))*time.Millisecond)
			e := New(Config{Cluster: cluster.NewNomad(env.client), Store: env.store, Holder: "crash", Health: HealthConfig{TimeScale: env.sim.TimeScale()}})
			final, err := e.Drive(ctx, rec.Namespace, rec.ID, nil)
			cancel()
			if err == nil && final.Status.Terminal() {
				if final.Status != restart.StatusSucceeded {
					for _, a := range final.Allocs {
						t.Logf("alloc %s: %s %s", a.ID[:8], a.State, a.Error)
					}
					t.Fatalf("%s: status %s (%s)", tc.typ, final.Status, final.Reason)
				}
				t.Logf("%s reschedule=%v: done after %d interruptions", tc.typ, reschedule, round)
				env.checkOnce(t, final)
				break
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrLeaseHeld) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

func TestE2EFaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nomadStore bool
		count      int
		spec       restart.Spec
		// fault brings the fault on after the plan; it returns what removes it (nil: none).
		fault func(sim *nomadsim.Cluster) func()
	}{
		{"error rate", false, 4, restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true},
			func(sim *nomadsim.Cluster) func() {
				return sim.SetFault(nomadsim.Fault{Path: "/v1/", ErrorRate: 0.1, Status: 500})
			}},
		{"leader lost, nomad store", true, 3, restart.Spec{Yes: true}, loseLeader},
		{"leader lost", false, 3, restart.Spec{Yes: true, Reschedule: true}, loseLeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startSim(t, tc.nomadStore)
			env.register(t, "web", "service", map[string]int{"web": tc.count})
			rec := env.plan(t, "web", tc.spec)
			remove := tc.fault(env.sim)
			if remove != nil {
				defer remove()
			}
			final := drive(t, env.e, rec, nil)
			if remove != nil {
				remove()
			}
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)", final.Status, final.Reason)
			}
			env.checkOnce(t, final)
		})
	}
}

// loseLeader has the simulation lose its leader for ten seconds of its time.
func loseLeader(sim *nomadsim.Cluster) func() {
	sim.LoseLeader(10 * time.Second)
	return nil
}

func TestE2EQuestionAnswered(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 2})
	rec := env.plan(t, "web", restart.Spec{BatchWaitAsk: true})
	wait, _ := driveAsync(env.e, rec)
	r := waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	if !strings.HasPrefix(r.Question.Prompt(), "Proceed with the next batch?") {
		t.Fatalf("question %q", r.Question.Prompt())
	}
	if _, err := env.e.Answer(context.Background(), rec.Namespace, rec.ID, "yes", "op"); err != nil {
		t.Fatal(err)
	}
	final := waitEnded(t, wait, restart.StatusSucceeded)
	env.checkOnce(t, final)
}

func TestE2ETasks(t *testing.T) {
	cases := []struct {
		name string
		spec restart.Spec
		want map[string]bool // tasks expected to get a restart request
	}{
		{"-task main", restart.Spec{Tasks: []string{"main"}, Yes: true}, map[string]bool{"main": true}},
		{"-task main -task side", restart.Spec{Tasks: []string{"main", "side"}, Yes: true}, map[string]bool{"main": true, "side": true}},
		{"-all-tasks", restart.Spec{AllTasks: true, Yes: true}, map[string]bool{"main": true, "side": true}},
		{"running tasks", restart.Spec{Yes: true}, map[string]bool{"main": true, "side": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := startSim(t, false)
			env.register(t, "web", "service", map[string]int{"web": 2}, "main", "side")
			final := drive(t, env.e, env.plan(t, "web", tc.spec), nil)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)", final.Status, final.Reason)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, err := simtest.CountRestarts(ctx, env.client, "default", "web")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range c.Allocs {
				for name, ts := range a.TaskStates {
					signaled := 0
					for _, e := range ts.Events {
						if e.Type == api.TaskRestartSignal {
							signaled++
						}
					}
					want := 0
					if tc.want[name] {
						want = 1
					}
					if signaled != want {
						t.Errorf("alloc %s task %s: %d restarts, want %d", a.ID[:8], name, signaled, want)
					}
				}
			}
		})
	}
}

func TestE2EPauseResumeCancel(t *testing.T) {
	env := startSim(t, true) // the Nomad store: steering through Variables and blocking queries
	env.register(t, "web", "service", map[string]int{"web": 4})
	rec := env.plan(t, "web", restart.Spec{Yes: true, BatchWait: 200 * time.Millisecond})
	if _, err := env.e.Pause(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	wait, _ := driveAsync(env.e, rec)
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Status == restart.StatusPaused })
	if _, err := env.e.Resume(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.CurrentBatch >= 2 })
	if _, err := env.e.Cancel(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	final := waitEnded(t, wait, restart.StatusCanceled)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := simtest.CountRestarts(ctx, env.client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, a := range final.Allocs {
		switch a.State {
		case restart.AllocDone:
			done++
			if c.InPlace[a.ID] != 1 {
				t.Errorf("done allocation %s restarted %d times", a.ID, c.InPlace[a.ID])
			}
		case restart.AllocPending:
			if c.InPlace[a.ID] != 0 {
				t.Errorf("pending allocation %s restarted %d times", a.ID, c.InPlace[a.ID])
			}
		default:
			t.Errorf("allocation %s left %s in a canceled restart", a.ID, a.State)
		}
	}
	if done < 2 || done == 4 {
		t.Errorf("%d allocations done, want at least 2 and not all", done)
	}
}

// TestE2ENodeLost loses a node after the plan: its allocations are replaced by the scheduler
// before their batch comes, and are skipped with the reason rather than restarted or failed.
func TestE2ENodeLost(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 4})
	rec := env.plan(t, "web", restart.Spec{Yes: true, BatchSizes: []restart.BatchSize{{N: 2}}})
	lost := rec.Allocs[len(rec.Allocs)-1].NodeID
	env.sim.DownNode(lost)
	final := drive(t, env.e, rec, nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	var restarted []string
	for _, a := range final.Allocs {
		switch {
		case a.NodeID == lost && a.State != restart.AllocSkipped:
			t.Errorf("allocation %s on the lost node is %s, want skipped", a.ID, a.State)
		case a.NodeID != lost && a.State != restart.AllocDone:
			t.Errorf("allocation %s is %s (%s), want done", a.ID, a.State, a.Error)
		case a.NodeID != lost:
			restarted = append(restarted, a.ID)
		}
	}
	simtest.CheckOnce(t, env.client, "default", "web", restarted, false, testTimeout)
}

// TestE2EDriveHeld drives restarts created with their lease held: one runs to its end,
// restarting every allocation once, and no other driver could take it up meanwhile; one
// canceled between its creation and its drive ends canceled, and one paused then pauses
// before its first batch, neither restarting anything; one whose lease was given up
// (Release) is driven by another driver.
func TestE2EDriveHeld(t *testing.T) {
	env := startSim(t, true)
	env.register(t, "web", "service", map[string]int{"api": 3})
	env.register(t, "db", "service", map[string]int{"main": 2})
	env.register(t, "cache", "service", map[string]int{"main": 2})
	env.register(t, "queue", "service", map[string]int{"main": 1})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true}
	other := New(Config{Cluster: env.e.cluster, Store: env.store, Holder: "agent:1"})

	h := env.planHeld(t, "web", spec)
	if rec, err := other.Drive(ctx, h.Record().Namespace, h.Record().ID, nil); !errors.Is(err, store.ErrLeaseHeld) || rec.Status != restart.StatusPending {
		t.Fatalf("another driver's Drive of a restart created held: %v, want ErrLeaseHeld", err)
	}
	var l eventLog
	final, err := env.e.DriveHeld(ctx, h, l.sink)
	if err != nil || final.Status != restart.StatusSucceeded {
		t.Fatalf("DriveHeld: %v, status %s (%s)\n%s", err, final.Status, final.Reason, l.messages())
	}
	if h.Record().Status != restart.StatusPending {
		t.Errorf("DriveHeld changed the caller's record: status %s", h.Record().Status)
	}
	for _, ev := range final.Events {
		if ev.Type == restart.EventDriver {
			t.Errorf("a driver event in a restart driven by its creator alone: %q", ev.Message)
		}
	}
	env.checkOnce(t, final)

	canceled := env.planHeld(t, "db", spec)
	if _, err := env.e.Cancel(ctx, canceled.Record().Namespace, canceled.Record().ID, "tester"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	final, err = env.e.DriveHeld(ctx, canceled, nil)
	if err != nil || final.Status != restart.StatusCanceled {
		t.Fatalf("DriveHeld of a restart canceled since its creation: %v, status %s", err, final.Status)
	}
	noRestarts(ctx, t, env, "db")

	paused := env.planHeld(t, "cache", spec)
	if _, err := env.e.Pause(ctx, paused.Record().Namespace, paused.Record().ID, "tester"); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	dctx, detach := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = env.e.DriveHeld(dctx, paused, nil)
	}()
	simtest.WaitFor(t, ctx, "the restart paused since its creation to pause", func() bool {
		r, err := env.store.Get(ctx, paused.Record().Namespace, paused.Record().ID)
		return err == nil && r.Status == restart.StatusPaused
	})
	detach()
	<-done
	noRestarts(ctx, t, env, "cache")

	given := env.planHeld(t, "queue", spec)
	if err := given.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	final, err = other.Drive(ctx, given.Record().Namespace, given.Record().ID, nil)
	if err != nil || final.Status != restart.StatusSucceeded {
		t.Fatalf("another driver's Drive of a restart given up: %v, status %s (%s)", err, final.Status, final.Reason)
	}
	env.checkOnce(t, final)
}

// planHeld plans a restart of job and creates it with its lease held (CreateHeld).
func (env *simEnv) planHeld(t testing.TB, job string, spec restart.Spec) *Held {
	t.Helper()
	ctx, rec := env.planned(t, job, spec)
	h, err := env.e.CreateHeld(ctx, rec)
	if err != nil {
		t.Fatalf("CreateHeld: %v", err)
	}
	return h
}

// noRestarts fails the test if Nomad's facts show an allocation of job restarted.
func noRestarts(ctx context.Context, t *testing.T, env *simEnv, job string) {
	t.Helper()
	counts, err := simtest.CountRestarts(ctx, env.client, "default", job)
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range counts.InPlace {
		t.Errorf("allocation %s of job %s was restarted %d times", id, job, n)
	}
}

// TestPendingCancelAppliedByNextDriver: a cancel recorded while another (dead) driver holds
// the lease is not overridden by Resume or Pause, and the next driver to take the lease ends
// the restart as canceled without restarting anything.
func TestPendingCancelAppliedByNextDriver(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 2}, "main")
	rec := env.plan(t, "web", restart.Spec{Yes: true})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	ghost, err := env.store.AcquireLease(ctx, rec.Namespace, rec.ID, "ghost")
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.e.Cancel(ctx, rec.Namespace, rec.ID, "op")
	if err != nil || got.Status.Terminal() || got.Control.Intent != restart.IntentCancel {
		t.Fatalf("Cancel while held: %v, status %v intent %v; want a pending cancel", err, got.Status, got.Control.Intent)
	}
	for name, do := range map[string]func(context.Context, string, string, string) (*restart.Record, error){
		"Resume": env.e.Resume, "Pause": env.e.Pause,
	} {
		var ce *steer.CancelingError
		if _, err := do(ctx, rec.Namespace, rec.ID, "other"); !errors.As(err, &ce) {
			t.Errorf("%s of a canceling restart: %v, want *steer.CancelingError", name, err)
		}
	}
	if err := ghost.Release(ctx); err != nil { // the ghost's lease ends (died, expired)
		t.Fatal(err)
	}
	final := drive(t, env.e, rec, nil)
	if final.Status != restart.StatusCanceled {
		t.Fatalf("next driver left status %s (%s), want canceled", final.Status, final.Reason)
	}
	c, err := simtest.CountRestarts(ctx, env.client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Allocs {
		for task, ts := range a.TaskStates {
			for _, ev := range ts.Events {
				if ev.Type == api.TaskRestartSignal {
					t.Errorf("alloc %s task %s restarted by a canceled restart", a.ID[:8], task)
				}
			}
		}
	}
}
