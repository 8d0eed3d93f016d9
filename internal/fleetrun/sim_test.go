package fleetrun

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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
