package fleetrun

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

const testTimeout = 3 * time.Minute

// env is a fleet driver wired to a simulated Nomad over real HTTP.
type env struct {
	sim      *nomadsim.Cluster
	client   *api.Client
	nomad    *cluster.Nomad
	fleets   store.Fleets
	restarts store.Store
	eng      *engine.Engine
}

func startEnv(t testing.TB) *env {
	t.Helper()
	sim := simtest.Start(t, nomadsim.Options{Seed: 7})
	client := simtest.Client(t, sim)
	nc := cluster.NewNomad(client)
	restarts := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	e := engine.New(engine.Config{Cluster: nc, Store: restarts, Holder: "fleet-test:1", Health: engine.HealthConfig{Clock: sim.Now, TimeScale: sim.TimeScale()}, MaxFeeds: 16})
	return &env{sim: sim, client: client, nomad: nc, fleets: nomadstore.NewFleets(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{}), restarts: restarts, eng: e}
}

func (e *env) driver(holder string, driveChildren bool) *Driver {
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return New(Config{Fleets: e.fleets, Restarts: e.restarts, Engine: e.eng, Holder: holder, DriveChildren: driveChildren, Logger: log})
}

func ptr[T any](v T) *T { return &v }

// register runs service jobs named prefix-0..n-1 with count allocations each and waits
// until they run.
func (e *env) register(t testing.TB, prefix string, n, count int, meta map[string]string) []string {
	t.Helper()
	var ids []string
	var jobs []*api.Job
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		job := &api.Job{ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"dc1", "dc2"}, Meta: meta, Priority: ptr(50 + i)}
		tg := api.NewTaskGroup("g", count)
		task := api.NewTask("main", "raw_exec")
		task.Config = map[string]any{"command": "/bin/sh"}
		task.Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(16)})
		tg.AddTask(task)
		job.AddTaskGroup(tg)
		jobs, ids = append(jobs, job), append(ids, id)
	}
	simtest.RegisterRunning(t, e.sim, jobs...)
	e.waitNoDeployments(t, ids)
	return ids
}

// waitNoDeployments waits until the jobs' deployments ended: Nomad refuses a restart while
// one runs.
func (e *env) waitNoDeployments(t testing.TB, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, id := range ids {
		simtest.WaitFor(t, ctx, "the deployment of "+id+" to end", func() bool {
			d, err := e.nomad.ActiveDeployment(ctx, "default", id)
			return err == nil && d == nil
		})
	}
}

// file selects the jobs filter matches and records the fleet, as `run -jobs -detach` does.
func (e *env) file(t testing.TB, filter string, spec restart.Spec, opts fleet.Options) *fleet.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sel := fleet.Selection{Namespace: "default", Filter: filter}
	got, err := Select(ctx, e.nomad, sel, spec, opts)
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	rec := NewRecord(uuid.NewString(), HomeNamespace(sel.Namespace), sel, spec, opts, got.Jobs, got.Outside, e.client.Address(), time.Now())
	if err := e.fleets.Create(ctx, rec); err != nil {
		t.Fatalf("CreateFleet: %v", err)
	}
	return rec
}

func options(parallel, failed int, onError restart.OnError) fleet.Options {
	o := fleet.DefaultOptions()
	o.MaxParallelJobs, o.MaxFailedJobs, o.OnError = parallel, failed, onError
	return o
}

func runningSpec() restart.Spec {
	return restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}}
}

// checkJobsOnce asserts from Nomad's facts that every allocation of each job was restarted
// exactly once, and returns each job's restart window on Nomad's clock.
func (e *env) checkJobsOnce(t *testing.T, rec *fleet.Record) []simtest.Window {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var windows []simtest.Window
	for _, j := range rec.Jobs {
		if j.Status != fleet.JobSucceeded {
			continue
		}
		child, err := e.restarts.Get(ctx, j.Namespace, j.RestartID)
		if err != nil {
			t.Fatalf("reading the child of %s: %v", j.JobID, err)
		}
		var ids []string
		for _, a := range child.Allocs {
			ids = append(ids, a.ID)
		}
		simtest.CheckOnce(t, e.client, j.Namespace, j.JobID, ids, false, testTimeout)
		w, err := simtest.RestartWindow(ctx, e.client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
	}
	return windows
}

func counts(rec *fleet.Record) map[fleet.JobStatus]int { return rec.Counts() }

// runInBackground drives the fleet with d until it ends; the channel receives the fleet
// as Run returned it.
func runInBackground(ctx context.Context, t *testing.T, d *Driver, rec *fleet.Record) <-chan *fleet.Record {
	result := make(chan *fleet.Record, 1)
	go func() {
		done, err := d.Run(ctx, rec.Namespace, rec.ID, nil)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		result <- done
	}()
	return result
}

// reader returns a function that reads the fleet as stored.
func (e *env) reader(ctx context.Context, t *testing.T, rec *fleet.Record) func() *fleet.Record {
	return func() *fleet.Record {
		f, err := e.fleets.Get(ctx, rec.Namespace, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// registerChecked registers, for each name, a service job of two allocations whose group has a
// Nomad service with a scripted check "up" (passing), and returns the names.
func (e *env) registerChecked(t testing.TB, names ...string) {
	t.Helper()
	var jobs []*api.Job
	for _, id := range names {
		job := api.NewServiceJob(id, id, "global", 50)
		job.Datacenters = []string{"dc1", "dc2"}
		task := api.NewTask("main", "raw_exec").SetConfig("command", "/bin/sleep")
		task.Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(16)})
		tg := api.NewTaskGroup("g", 2).AddTask(task)
		tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
		tg.Services = []*api.Service{{Name: id, PortLabel: "http", Provider: "nomad",
			Checks: []api.ServiceCheck{{Name: "up", Type: "tcp", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta = map[string]string{"nomadsim.check.up": "pass"}
		tg.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Second), HealthyDeadline: ptr(20 * time.Second)}
		job.TaskGroups = []*api.TaskGroup{tg}
		jobs = append(jobs, job)
	}
	simtest.RegisterRunning(t, e.sim, jobs...)
	e.waitNoDeployments(t, names)
}

// nineInWaves is a fleet of 9 jobs in 3 waves: wave-a-i, then wave-b-i after wave-a-i,
// then wave-c-i after wave-b-i (i = 1..3); wave-c-1's order comes from its meta, the rest
// from -after.
func nineInWaves(t *testing.T, e *env, parallel, failed int, wait time.Duration) *fleet.Record {
	t.Helper()
	var names []string
	for _, w := range []string{"a", "b", "c"} {
		for i := 1; i <= 3; i++ {
			names = append(names, fmt.Sprintf("wave-%s-%d", w, i))
		}
	}
	e.registerChecked(t, names...)
	c1, _, err := e.client.Jobs().Info("wave-c-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	c1.Meta = map[string]string{"nomad-restart.after": "wave-b-1"}
	if _, _, err := e.client.Jobs().Register(c1, nil); err != nil {
		t.Fatal(err)
	}
	e.waitNoDeployments(t, []string{"wave-c-1"})
	opts := options(parallel, failed, restart.OnErrorFail)
	for i := 1; i <= 3; i++ {
		d, err := fleet.ParseAfter(fmt.Sprintf("wave-b-%d: wave-a-%d", i, i))
		if err != nil {
			t.Fatal(err)
		}
		opts.After = append(opts.After, d)
	}
	d, _ := fleet.ParseAfter("wave-c-2: wave-b-2")
	d3, _ := fleet.ParseAfter("wave-c-3: wave-b-3")
	opts.After = append(opts.After, d, d3)
	opts.WaveWait = wait
	spec := restart.Spec{Health: restart.HealthChecks, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}},
		HealthyDeadline: 20 * time.Second, MinHealthyTime: time.Second}
	rec := e.file(t, `Name matches "^wave-"`, spec, opts)
	for _, j := range rec.Jobs {
		if want := int(j.JobID[5]-'a') + 1; j.Wave != want {
			t.Fatalf("job %s is in wave %d, want %d", j.JobID, j.Wave, want)
		}
	}
	return rec
}

// checkOrder asserts from Nomad's task events that each job restarted after its upstream's
// restart ended.
func (e *env) checkOrder(t *testing.T, rec *fleet.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	windows := map[string]simtest.Window{}
	for _, j := range rec.Jobs {
		w, err := simtest.RestartWindow(ctx, e.client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows[j.JobID] = w
	}
	for _, j := range rec.Jobs {
		for _, u := range j.After {
			down, up := windows[j.JobID], windows[u.JobID]
			if !down.From.IsZero() && !down.From.After(up.To) {
				t.Errorf("%s started restarting at %s, before its upstream %s ended at %s", j.JobID, down.From, u.JobID, up.To)
			}
		}
	}
}

// TestFleetWavesHoldTheDownstreamOfAnUnhealthyUpstream: a 3-wave fleet of 9 jobs whose
// wave-b-2 check fails once it restarts: wave-c-2 never starts, every other job restarts
// once, each after its upstream.
func TestFleetWavesHoldTheDownstreamOfAnUnhealthyUpstream(t *testing.T) {
	e := startEnv(t)
	rec := nineInWaves(t, e, 3, 1, 0)
	// From now on, a restarted process of wave-b-2 fails its check (for a minute, longer than its healthy deadline): its
	// restart's health gate fails.
	e.sim.ScriptCheck("default", "wave-b-2", "up", "pass_after=1m")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var waves []string
	done, err := e.driver("waves:1", true).Run(ctx, rec.Namespace, rec.ID, func(ev Event) {
		if ev.Type == fleet.EventWaveStarted {
			waves = append(waves, ev.Message)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]fleet.Job{}
	for _, j := range done.Jobs {
		byID[j.JobID] = j
	}
	if j := byID["wave-b-2"]; j.Status != fleet.JobFailed {
		t.Errorf("wave-b-2 %s %q, want failed", j.Status, j.Reason)
	}
	if j := byID["wave-c-2"]; j.Status != fleet.JobSkipped || j.RestartID != "" || !strings.Contains(j.Reason, "its upstream wave-b-2 failed") {
		t.Errorf("wave-c-2 %s (restart %q) %q, want skipped, never started, naming wave-b-2", j.Status, j.RestartID, j.Reason)
	}
	for id, j := range byID {
		if id != "wave-b-2" && id != "wave-c-2" && j.Status != fleet.JobSucceeded {
			t.Errorf("%s %s %q, want succeeded", id, j.Status, j.Reason)
		}
	}
	if w, _ := simtest.RestartWindow(ctx, e.client, "default", "wave-c-2"); !w.From.IsZero() {
		t.Errorf("wave-c-2 was restarted at %s", w.From)
	}
	if done.Status != restart.StatusFailed {
		t.Errorf("fleet %s, want failed (wave-b-2 failed)", done.Status)
	}
	if len(waves) != 3 || !strings.HasPrefix(waves[0], "Wave 1 of 3 started") {
		t.Errorf("wave events %q, want 3 starting with wave 1", waves)
	}
	e.checkJobsOnce(t, done)
	e.checkOrder(t, done)
}

// TestFleetWavesResumeAcrossKilledDrivers kills the driver of a 3-wave fleet again and
// again at random instants (between waves, while an upstream's evidence and its -wave-wait
// are measured), resuming it each time with a new driver: every job is restarted once,
// each after its upstream's restart ended and its evidence was recorded.
func TestFleetWavesResumeAcrossKilledDrivers(t *testing.T) {
	e := startEnv(t)
	rec := nineInWaves(t, e, 2, 0, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rng := rand.New(rand.NewPCG(35, 9))
	var done *fleet.Record
	kills, midEvidence := 0, 0
	for attempt := 0; done == nil || !done.Status.Terminal(); attempt++ {
		if attempt > 60 {
			t.Fatal("the fleet did not end after 60 drivers")
		}
		dctx, stop := context.WithCancel(ctx)
		if attempt%6 != 5 {
			time.AfterFunc(time.Duration(30+rng.IntN(400))*time.Millisecond, stop)
		}
		got, err := e.driver(fmt.Sprintf("waves:%d", attempt), true).Run(dctx, rec.Namespace, rec.ID, nil)
		stop()
		if err != nil && dctx.Err() == nil {
			t.Fatalf("driver %d: %v", attempt, err)
		}
		if got != nil && !got.Status.Terminal() {
			kills++
		}
		stored, err := e.fleets.Get(ctx, rec.Namespace, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkNoStartBeforeEvidence(t, stored)
		for _, j := range stored.Jobs {
			if j.Status == fleet.JobSucceeded && !j.Evidence.Ready && j.Evidence.Waits != "" {
				midEvidence++
			}
		}
		done = stored
	}
	t.Logf("%d drivers killed, %d of them while an upstream's evidence was being measured", kills, midEvidence)
	if done.Status != restart.StatusSucceeded {
		for _, j := range done.Jobs {
			t.Logf("%s: %s %q (evidence %+v)", j.JobID, j.Status, j.Reason, j.Evidence)
		}
		t.Fatalf("fleet %s: %s", done.Status, done.Reason)
	}
	e.checkJobsOnce(t, done)
	e.checkOrder(t, done)
}

// checkNoStartBeforeEvidence: in the stored fleet, no job started whose upstreams had not
// all given their evidence.
func checkNoStartBeforeEvidence(t *testing.T, rec *fleet.Record) {
	t.Helper()
	for _, j := range rec.Jobs {
		if j.RestartID == "" {
			continue
		}
		for _, u := range j.After {
			for _, up := range rec.Jobs {
				if fleet.RefOf(up) == u && !up.Evidence.Ready {
					t.Fatalf("%s started (restart %s) but its upstream %s has no evidence: %+v", j.JobID, j.RestartID, up.JobID, up.Evidence)
				}
			}
		}
	}
}

// TestFleetWavesAnswerYesLetsHeldJobsGoOn: with the failure budget spent under -on-error
// ask, the job after a failed upstream is held and the fleet asks; answered yes, the held
// job restarts without its upstream's evidence.
func TestFleetWavesAnswerYesLetsHeldJobsGoOn(t *testing.T) {
	e := startEnv(t)
	e.registerChecked(t, "ask-up", "ask-down")
	e.sim.ScriptCheck("default", "ask-up", "up", "pass_after=1m")
	opts := options(2, 0, restart.OnErrorAsk)
	d, _ := fleet.ParseAfter("ask-down: ask-up")
	opts.After = []fleet.Dependency{d}
	spec := restart.Spec{Health: restart.HealthChecks, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}},
		HealthyDeadline: 20 * time.Second, MinHealthyTime: time.Second}
	rec := e.file(t, `Name matches "^ask-"`, spec, opts)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	drv := e.driver("waves-ask:1", true)
	result := runInBackground(ctx, t, drv, rec)
	read := e.reader(ctx, t, rec)
	simtest.WaitFor(t, ctx, "the fleet to ask after ask-up failed", func() bool { return read().Status == restart.StatusWaiting })
	if j := read().Jobs[1]; j.JobID != "ask-down" || j.Status != fleet.JobPending || j.RestartID != "" {
		t.Fatalf("ask-down before the answer: %+v", j)
	}
	if _, err := drv.Answer(ctx, rec.Namespace, rec.ID, "y", "test"); err != nil {
		t.Fatal(err)
	}
	done := <-result
	if j := done.Jobs[1]; j.Status != fleet.JobSucceeded {
		t.Errorf("ask-down after yes: %s %q, want succeeded", j.Status, j.Reason)
	}
	if done.Jobs[0].Status != fleet.JobFailed || done.Status != restart.StatusFailed {
		t.Errorf("ask-up %s, fleet %s: want both failed", done.Jobs[0].Status, done.Status)
	}
}

// TestFleetWavesOutsideUpstreamNeverHealthy: a job whose upstream outside the fleet fails
// its checks is never restarted: it is recorded skipped naming that upstream, which counts
// as the one failure the budget allows, while the other job restarts; the fleet ends
// failed, saying an upstream outside it gave no evidence.
func TestFleetWavesOutsideUpstreamNeverHealthy(t *testing.T) {
	e := startEnv(t)
	e.registerChecked(t, "ext-gw", "ext-down", "ext-free")
	e.sim.ScriptCheck("default", "ext-gw", "up", "fail")
	opts := options(2, 1, restart.OnErrorFail)
	d, err := fleet.ParseAfter("ext-down: ext-gw")
	if err != nil {
		t.Fatal(err)
	}
	opts.After = []fleet.Dependency{d}
	spec := restart.Spec{Health: restart.HealthChecks, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}},
		HealthyDeadline: 20 * time.Second, MinHealthyTime: time.Second}
	rec := e.file(t, `Name matches "^ext-(down|free)$"`, spec, opts)
	if len(rec.Outside) != 1 || rec.Outside[0].JobID != "ext-gw" {
		t.Fatalf("upstreams outside the fleet %+v, want ext-gw", rec.Outside)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	done, err := e.driver("waves-outside:1", true).Run(ctx, rec.Namespace, rec.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]fleet.Job{}
	for _, j := range done.Jobs {
		byID[j.JobID] = j
	}
	if j := byID["ext-down"]; j.Status != fleet.JobSkipped || j.RestartID != "" || !strings.Contains(j.Reason, "its upstream ext-gw, outside the fleet, was not healthy") {
		t.Errorf("ext-down %s (restart %q) %q, want skipped, never started, naming ext-gw", j.Status, j.RestartID, j.Reason)
	}
	if j := byID["ext-free"]; j.Status != fleet.JobSucceeded {
		t.Errorf("ext-free %s %q, want succeeded: one failure is within the budget", j.Status, j.Reason)
	}
	if done.Status != restart.StatusFailed || !strings.Contains(done.Reason, "1 upstream outside the fleet gave no evidence") {
		t.Errorf("fleet %s %q, want failed naming the upstream outside it", done.Status, done.Reason)
	}
	if ev := done.Outside[0].Evidence; ev.Ready || ev.Unready == "" {
		t.Errorf("ext-gw's evidence %+v, want unready", ev)
	}
	for _, id := range []string{"ext-down", "ext-gw"} {
		if w, _ := simtest.RestartWindow(ctx, e.client, "default", id); !w.From.IsZero() {
			t.Errorf("%s was restarted at %s", id, w.From)
		}
	}
}
