package agent

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// testTimeout bounds every wait of these tests: generous, since two noisy cores may be
// shared with other packages' tests. Waits end on conditions, never on fixed sleeps.
const testTimeout = 90 * time.Second

// simScale runs the simulation fast: a 5 s kill timeout takes 100 ms.
const simScale = 50

type env struct {
	sim    *nomadsim.Cluster
	client *api.Client
	store  store.Store
	// planner creates restarts as `run -detach` does: plan, create, no driver.
	planner *engine.Engine
}

func startEnv(t testing.TB, opts nomadsim.Options) *env {
	t.Helper()
	if opts.TimeScale == 0 {
		opts.TimeScale = simScale
	}
	if opts.Seed == 0 {
		opts.Seed = 7
	}
	sim := simtest.Start(t, opts)
	client, err := sim.APIClient(sim.BootstrapToken())
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewNomad(client, store.NomadOptions{})
	e := &env{sim: sim, client: client, store: st}
	e.planner = engine.New(engine.Config{Cluster: cluster.NewNomad(client), Store: st, Holder: "cli:detached"})
	return e
}

// newAgent builds an agent on its own API client (with its metrics' counting transport) and
// the given token.
func (e *env) newAgent(t testing.TB, holder, token string, tweak func(*Config)) *Agent {
	t.Helper()
	m := NewMetrics()
	cfg := api.DefaultConfig()
	cfg.Address = e.sim.Addr()
	cfg.SecretID = token
	cfg.Region, cfg.Namespace = "", ""
	cfg.HttpClient = &http.Client{Transport: m.Transport(nil)}
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{
		Cluster: cluster.NewNomad(client),
		Store:   store.NewNomad(client, store.NomadOptions{}),
		Client:  client, Holder: holder, Metrics: m,
		MinListGap: 20 * time.Millisecond, ViewMaxAge: time.Millisecond,
		RetryFailed: 100 * time.Millisecond,
		// The gate measures min_healthy_time on the simulation's clock, which runs fast.
		Health: engine.HealthConfig{Clock: e.sim.Now, TimeScale: e.sim.TimeScale()},
	}
	if tweak != nil {
		tweak(&c)
	}
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// start runs a in the background; the returned stop cancels it and waits for Run to return.
func start(t testing.TB, a *Agent) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("agent %s: Run: %v", a.Holder(), err)
				}
			case <-time.After(testTimeout):
				t.Errorf("agent %s did not stop", a.Holder())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func ptr[T any](v T) *T { return &v }

// register runs a service job of count allocations in namespace ns and waits until it runs
// and its deployment has ended (Nomad refuses restarts during a deployment).
func (e *env) register(t testing.TB, ns, id string, count int, meta map[string]string) {
	t.Helper()
	if err := e.registerJob(ns, id, count, meta); err != nil {
		t.Fatal(err)
	}
}

// registerMany registers jobs id-0 .. id-(n-1) concurrently (each waits for its deployment).
func (e *env) registerMany(t testing.TB, ns, id string, n, count int) []string {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%03d", id, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.registerJob(ns, ids[i], count, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func (e *env) registerJob(ns, id string, count int, meta map[string]string) error {
	job := &api.Job{ID: ptr(id), Name: ptr(id), Type: ptr("service"), Namespace: ptr(ns),
		Datacenters: []string{"dc1", "dc2"}, Region: ptr("global")}
	tg := api.NewTaskGroup("web", count)
	task := api.NewTask("main", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh"}
	task.Meta = meta
	task.Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(16)})
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	if _, err := e.sim.RegisterJob(job); err != nil {
		return fmt.Errorf("registering job %s: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// Test code may wait by polling (through the API, as a user would); the agent never does.
	nc := cluster.NewNomad(e.client)
	for {
		if running(ctx, e.client, ns, id, count) {
			d, err := nc.ActiveDeployment(ctx, ns, id)
			if err == nil && d == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the deployment of %s to end: %w", id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// detached creates a pending restart of job, as `nomad-restart run -detach` does.
func (e *env) detached(t testing.TB, ns, job string, spec restart.Spec) *restart.Record {
	t.Helper()
	ctx := testContext(t)
	p, err := e.planner.Plan(ctx, engine.Request{Namespace: ns, Job: job, Spec: spec})
	if err != nil {
		t.Fatalf("planning a restart of %s: %v", job, err)
	}
	if err := e.planner.Create(ctx, p.Record); err != nil {
		t.Fatalf("creating the restart of %s: %v", job, err)
	}
	return p.Record
}

// waitEnd watches a restart's record (blocking queries) until it is terminal.
func (e *env) waitEnd(t testing.TB, rec *restart.Record) *restart.Record {
	t.Helper()
	ctx := testContext(t)
	cur := rec
	for !cur.Status.Terminal() {
		next, err := e.store.Watch(ctx, rec.Namespace, rec.ID, cur.ModifyIndex)
		if err != nil {
			t.Fatalf("restart %s of %s did not end (last status %s): %v", rec.ID, rec.JobID, cur.Status, err)
		}
		cur = next
	}
	return cur
}

// checkOnce asserts from Nomad's facts that each planned allocation was restarted once.
func (e *env) checkOnce(t testing.TB, rec *restart.Record) {
	t.Helper()
	var ids []string
	for _, a := range rec.Allocs {
		ids = append(ids, a.ID)
	}
	simtest.CheckOnce(t, e.client, rec.Namespace, rec.JobID, ids, false, testTimeout)
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}

// running reports whether the job has count allocations, all running with every task
// running, as the API shows them.
func running(ctx context.Context, client *api.Client, ns, id string, count int) bool {
	stubs, _, err := client.Jobs().Allocations(id, false, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return false
	}
	n := 0
	for _, a := range stubs {
		if a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		if a.ClientStatus != api.AllocClientStatusRunning {
			return false
		}
		for _, ts := range a.TaskStates {
			if ts.State != "running" {
				return false
			}
		}
		n++
	}
	return n == count
}
