// Package agenttest is the shared support of the tests that run an agent on nomadsim: the
// agent's own tests, its page's and its command's. It starts a simulated cluster with the
// restart and fleet stores and a planner that files restarts as `run -detach` does,
// builds an agent's parts as the command does (parts.go), registers jobs and waits until
// they run, files fleets, holds a dead driver's lease, waits on records, runs an agent in
// the background, and makes the checks those tests share (each allocation restarted once,
// one driver at a time, a fleet within its -max-parallel-jobs, from Nomad's own facts).
//
// It does not import internal/agent, so that the agent's in-package tests may use it too:
// building an agent stays with each package's tests. Only tests import it (internal/archtest
// checks).
package agenttest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// Timeout bounds every wait of these tests: generous, since two noisy cores may be shared
// with other packages' tests. Waits end on conditions, never on fixed sleeps.
const Timeout = 90 * time.Second

// Context is a context that ends after Timeout, or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// Env is a simulated cluster and what the tests reach it with, as the bootstrap token.
type Env struct {
	Sim    *nomadsim.Cluster
	Client *api.Client // the bootstrap token's
	// Vars is the Variables layer on Client, which the stores are built on.
	Vars   *nomadvars.Client
	Store  store.Store // the restarts' records in Nomad Variables
	Fleets store.Fleets
	// Planner files restarts as `run -detach` does: plan, create, no driver.
	Planner *engine.Engine
}

// StartEnv starts a simulated cluster (simtest.Start: at simtest.TimeScale unless opts say
// otherwise), with seed 7 unless opts say otherwise.
func StartEnv(t testing.TB, opts nomadsim.Options) *Env {
	t.Helper()
	if opts.Seed == 0 {
		opts.Seed = 7
	}
	sim := simtest.Start(t, opts)
	client := simtest.ClientAs(t, sim, sim.BootstrapToken())
	vars := nomadvars.New(client, nomadvars.Options{})
	st := nomadstore.NewRestarts(vars, nomadstore.Options{})
	return &Env{Sim: sim, Client: client, Vars: vars, Store: st, Fleets: nomadstore.NewFleets(vars, nomadstore.Options{}),
		Planner: engine.New(engine.Config{Cluster: cluster.NewNomad(client), Store: st, Holder: "cli:detached"})}
}

// AgentClient is an api client as the command builds the agent's: with token, no region or
// namespace of its own (the agent works across them), its requests sent through rt (the
// agent's metrics' counting transport, or a test's).
func (e *Env) AgentClient(t testing.TB, token string, rt http.RoundTripper) *api.Client {
	t.Helper()
	return simtest.ClientVia(t, e.Sim, token, rt)
}

// Health is the health gate's configuration on the simulation's clock, which runs fast:
// the gate measures min_healthy_time on it.
func (e *Env) Health() engine.HealthConfig {
	return engine.HealthConfig{Clock: e.Sim.Now, TimeScale: e.Sim.TimeScale()}
}

// SlowStart is the tasks' meta that makes each take 20 simulated seconds (0.4 s at
// simtest.TimeScale) to run again, so that restarts stay in flight long enough to overlap,
// to be paused, or to lose their driver.
var SlowStart = map[string]string{"nomadsim.start_delay": "20s"}

// Job is a service job of count allocations of one raw_exec task, main, with the task's
// meta (nomadsim reads its start delays there), in namespace ns.
func Job(ns, id string, count int, meta map[string]string) *api.Job {
	job := &api.Job{ID: &id, Name: &id, Type: new("service"), Namespace: &ns, Datacenters: []string{"dc1", "dc2"}, Region: new("global")}
	task := api.NewTask("main", "raw_exec")
	task.Config, task.Meta = map[string]any{"command": "/bin/sh"}, meta
	task.Require(&api.Resources{CPU: new(10), MemoryMB: new(16)})
	job.AddTaskGroup(api.NewTaskGroup("web", count).AddTask(task))
	return job
}

// Register runs Job(ns, id, count, meta) and waits until it runs and its deployment has
// ended (Nomad refuses restarts during a deployment).
func (e *Env) Register(t testing.TB, ns, id string, count int, meta map[string]string) {
	t.Helper()
	if err := e.RegisterJob(ns, id, count, meta); err != nil {
		t.Fatal(err)
	}
}

// RegisterJob is Register, returning what went wrong.
func (e *Env) RegisterJob(ns, id string, count int, meta map[string]string) error {
	if _, err := e.Sim.RegisterJob(Job(ns, id, count, meta)); err != nil {
		return fmt.Errorf("registering job %s: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := e.Sim.WaitJobRunning(ctx, ns, id); err != nil {
		return err
	}
	// And as a user sees it, through the API (test code may poll; the agent never does).
	nc := cluster.NewNomad(e.Client)
	for {
		if Running(ctx, e.Client, ns, id, count) {
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

// RegisterJobs registers the jobs prefix-000 .. prefix-(n-1) of namespace ns concurrently,
// count allocations each with the tasks' meta, waits until they run, and returns their IDs.
func (e *Env) RegisterJobs(t testing.TB, ns, prefix string, n, count int, meta map[string]string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	simtest.Concurrently(t, n, func(i int) error { return e.RegisterJob(ns, ids[i], count, meta) })
	return ids
}

// Running reports whether the job has count allocations, all running with every task
// running, as the API shows them.
func Running(ctx context.Context, client *api.Client, ns, id string, count int) bool {
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

// ShippedToken returns a token of sim holding the policy the project ships for role
// ("operator", "agent": deploy/<role>-policy.hcl), as docs/acl.md tells operators to
// create it.
func ShippedToken(t testing.TB, sim *nomadsim.Cluster, role string) string {
	t.Helper()
	rules, err := os.ReadFile(filepath.Join(moduleRoot(t), "deploy", role+"-policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := sim.CreateToken(role, map[string]string{"nomad-restart-" + role: string(rules)})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// ShippedToken is ShippedToken on the env's cluster.
func (e *Env) ShippedToken(t testing.TB, role string) string {
	t.Helper()
	return ShippedToken(t, e.Sim, role)
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
