package cli

import (
	"context"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// startSimEnv starts a simulated cluster with jobs registered and running, and the
// environment to run commands on it.
func startSimEnv(t *testing.T, opts nomadsim.Options, jobs ...*api.Job) (*nomadsim.Cluster, cliEnv) {
	t.Helper()
	c := simtest.Start(t, opts)
	for _, job := range jobs {
		register(t, c, job)
	}
	return c, newCLIEnv(t, c)
}

// startWebEnv is startSimEnv of service job "web" of count allocations, with the test's
// context.
func startWebEnv(t *testing.T, count int) (*nomadsim.Cluster, cliEnv, context.Context) {
	t.Helper()
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, count))
	return c, e, testCtx(t)
}

// startFleetEnv is startSimEnv of n service jobs prefix-0..n-1 of count allocations each
// (registerFleetJobs), with the test's context.
func startFleetEnv(t *testing.T, prefix string, n, count int) (*nomadsim.Cluster, cliEnv, context.Context) {
	t.Helper()
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", prefix, n, count)
	return c, e, testCtx(t)
}

// adminClient is a Nomad API client for c with its bootstrap (management) token.
func adminClient(t testing.TB, c *nomadsim.Cluster) *api.Client {
	t.Helper()
	return simtest.ClientAs(t, c, c.BootstrapToken())
}

// register registers job and waits until its allocations run.
func register(t testing.TB, c *nomadsim.Cluster, job *api.Job) {
	t.Helper()
	simtest.RegisterRunning(t, c, job)
	// Poststart sidecars start after the main tasks: wait until every task that is meant
	// to keep running runs, so that "restart the running tasks" has a fixed meaning.
	simtest.WaitWithin(t, 30*time.Second, "every task of "+*job.ID+" to run", func() bool {
		for _, a := range allocsOf(t, c, *job.ID) {
			for name, ts := range a.TaskStates {
				if name != "prestart" && ts.State != "running" && a.ClientStatus == api.AllocClientStatusRunning {
					return false
				}
			}
		}
		return true
	})
}

// testJob is the job of Nomad's own tests of `nomad job restart`: group single_task with 3
// allocations of task main, and group multiple_tasks with 2 allocations of a prestart task
// that has run (not a sidecar), a poststart sidecar, and main.
func testJob(id, typ string) *api.Job {
	job := &api.Job{ID: &id, Name: &id, Type: &typ, Datacenters: []string{"dc1", "dc2"}}
	task := func(name string) *api.Task {
		t := api.NewTask(name, "mock_driver")
		if typ == api.JobTypeBatch || typ == api.JobTypeSysbatch {
			// nomadsim ends unscripted batch tasks at once; these must run until restarted.
			t.Meta = map[string]string{"nomadsim.run_for": "1h"}
		}
		return t
	}
	single := api.NewTaskGroup("single_task", 3)
	single.AddTask(task("main"))
	multi := api.NewTaskGroup("multiple_tasks", 2)
	pre := task("prestart")
	pre.Lifecycle = &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart, Sidecar: false}
	pre.Meta = map[string]string{"nomadsim.run_for": "100ms"}
	side := task("sidecar")
	side.Lifecycle = &api.TaskLifecycle{Hook: api.TaskLifecycleHookPoststart, Sidecar: true}
	multi.AddTask(pre)
	multi.AddTask(side)
	multi.AddTask(task("main"))
	for _, tg := range []*api.TaskGroup{single, multi} {
		if typ == api.JobTypeService {
			tg.Update = &api.UpdateStrategy{MaxParallel: new(int)} // no deployment on register
		}
		job.AddTaskGroup(tg)
	}
	return job
}

// simpleJob is a job with one group of count allocations of task main (simtest.Job; a batch
// task runs for an hour).
func simpleJob(id, typ string, count int) *api.Job {
	return simtest.Job(id, typ, count, "1h")
}

// checkedJob is a service job of count allocations whose task has a Consul service with
// check "ready" following script (nomadsim's check scripts), and whose update block sets
// the gate's times.
func checkedJob(id string, count int, script string, minHealthy, deadline time.Duration) *api.Job {
	job := simpleJob(id, api.JobTypeService, count)
	tg := job.TaskGroups[0]
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Tasks[0].Services = []*api.Service{{Name: id + "-http", PortLabel: "http", Provider: "consul",
		Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	tg.Meta = map[string]string{"nomadsim.check.ready": script}
	tg.Update = &api.UpdateStrategy{MaxParallel: new(int), MinHealthyTime: &minHealthy, HealthyDeadline: &deadline}
	return job
}

// cliEnv is what a command runs with: the sim's address and a private local store.
type cliEnv struct {
	addr     string
	localDir string
	token    string
	// consul is CONSUL_HTTP_ADDR ("" unset); clock and scale are the simulation's, for
	// the health gate.
	consul string
	clock  func() time.Time
	scale  float64
	// env holds more environment variables for the commands (NOMAD_NAMESPACE,
	// NOMAD_RESTART_REQUEST_TIMEOUT).
	env map[string]string
}

func newCLIEnv(t testing.TB, c *nomadsim.Cluster) cliEnv {
	return cliEnv{addr: c.Addr(), localDir: t.TempDir(), clock: c.Now, scale: c.TimeScale()}
}

// newCLIEnvAs is newCLIEnv whose commands carry a token of c under one policy, named name,
// of rules.
func newCLIEnvAs(t *testing.T, c *nomadsim.Cluster, name, rules string) cliEnv {
	t.Helper()
	e := newCLIEnv(t, c)
	e.token = simtest.Token(t, c, name, rules)
	return e
}

// localStore opens the environment's local store, where commands with -state local write.
func (e cliEnv) localStore(t *testing.T) *localstore.Store {
	t.Helper()
	local, err := localstore.New(e.localDir)
	if err != nil {
		t.Fatalf("opening the local store: %v", err)
	}
	return local
}

// localRecords lists the records of the environment's local store: those of job in
// namespace default, or every one for job "". It fails the test when the store cannot be
// read.
func (e cliEnv) localRecords(t *testing.T, ctx context.Context, job string) []*restart.Record {
	t.Helper()
	filter := store.Filter{}
	if job != "" {
		filter = store.Filter{Namespace: "default", JobID: job}
	}
	recs, err := e.localStore(t).List(ctx, filter)
	if err != nil {
		t.Fatalf("listing the local store's records: %v", err)
	}
	return recs
}

// run runs one command in-process, off a terminal, and returns its exit code and output.
func (e cliEnv) run(ctx context.Context, args ...string) (int, string, string) {
	return e.runIn(ctx, strings.NewReader(""), false, args...)
}

func (e cliEnv) runIn(ctx context.Context, stdin *strings.Reader, interactive bool, args ...string) (int, string, string) {
	var out, errb simtest.SyncBuffer
	env := map[string]string{"NOMAD_ADDR": e.addr, "NOMAD_TOKEN": e.token, "USER": "tester", "CONSUL_HTTP_ADDR": e.consul}
	if e.consul == "" {
		// Never the machine's own Consul: a closed port, so "no Consul" is deterministic.
		env["CONSUL_HTTP_ADDR"] = "http://127.0.0.1:1"
	}
	maps.Copy(env, e.env)
	a := newApp(stdin, &out, &errb, func(k string) string { return env[k] })
	a.interactive = interactive
	a.backend = nomadBackend{localDir: e.localDir, clock: e.clock, timeScale: e.scale}
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

// allocsOf returns the job's allocations, newest first (Nomad's restart order), full.
func allocsOf(t testing.TB, c *nomadsim.Cluster, jobID string) []*api.Allocation {
	t.Helper()
	client := adminClient(t, c)
	stubs, _, err := client.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		t.Fatalf("allocations of %s: %v", jobID, err)
	}
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].CreateIndex > stubs[j].CreateIndex })
	var out []*api.Allocation
	for _, s := range stubs {
		a, _, err := client.Allocations().Info(s.ID, nil)
		if err != nil {
			t.Fatalf("allocation %s: %v", s.ID, err)
		}
		out = append(out, a)
	}
	return out
}

// restarts counts each task's restarts in the job's running allocations.
func restarts(t *testing.T, c *nomadsim.Cluster, jobID string) map[string]map[string]uint64 {
	t.Helper()
	out := map[string]map[string]uint64{}
	for _, a := range allocsOf(t, c, jobID) {
		if a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		m := map[string]uint64{}
		for name, ts := range a.TaskStates {
			m[name] = ts.Restarts
		}
		out[a.ID] = m
	}
	return out
}

// requests counts the requests of a route over every method.
func requests(s nomadsim.Stats, route string) int64 {
	return requestsOf(s.Endpoints, route)
}

// requestsOf counts the requests of a route over every method in endpoint statistics.
func requestsOf(eps map[string]nomadsim.EndpointStats, route string) int64 {
	var n int64
	for _, e := range eps {
		if e.Route == route {
			n += e.Requests
		}
	}
	return n
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
