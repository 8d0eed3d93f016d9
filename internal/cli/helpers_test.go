package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
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
	a.environ = func() []string {
		var kv []string
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		return kv
	}
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

// The end-to-end tests' shared steps: run a command in the background, detach a restart,
// read one back, wait for one, and check what the cluster saw; the same for fleets; and
// the cluster of the watches tests, which the JSON schema test uses too.

// cmdResult is what a command run in the background ended with.
type cmdResult struct {
	code     int
	out, err string
}

// goRun runs a command (e.run, runFake, ...) in the background; its result arrives on the
// channel.
func goRun(run func() (int, string, string)) <-chan cmdResult {
	done := make(chan cmdResult, 1)
	go func() {
		code, out, errOut := run()
		done <- cmdResult{code, out, errOut}
	}()
	return done
}

// start runs one command in the background, off a terminal.
func (e cliEnv) start(ctx context.Context, args ...string) <-chan cmdResult {
	return goRun(func() (int, string, string) { return e.run(ctx, args...) })
}

// runDetached runs `run -detach args...`, which must succeed, and returns the restart's
// short ID and the output.
func (e cliEnv) runDetached(t *testing.T, ctx context.Context, args ...string) (id, out string) {
	t.Helper()
	code, out, errOut := e.run(ctx, append([]string{"run", "-detach"}, args...)...)
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id, _ = createdID(t, out)
	return id, out
}

var createdRe = regexp.MustCompile(`Restart ([0-9a-f]{8}) of job "[^"]+" created \(state: (\w+)\)`)

// createdID returns the short ID and store kind `run` printed.
func createdID(t *testing.T, out string) (string, string) {
	t.Helper()
	m := createdRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no created line in:\n%s", out)
	}
	return m[1], m[2]
}

// statusOf reads a restart with `status -json`.
func statusOf(t *testing.T, ctx context.Context, e cliEnv, id string) *restart.Record {
	t.Helper()
	rec, err := readStatus(ctx, e, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// readStatus is `status -json <id>`'s record, or why it could not be read: for a wait on a
// restart that a fleet names before its record exists.
func readStatus(ctx context.Context, e cliEnv, id string) (*restart.Record, error) {
	code, out, errOut := e.run(ctx, "status", "-json", id)
	if code != 0 {
		return nil, fmt.Errorf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	var rec restart.Record
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		return nil, fmt.Errorf("status -json: %w\n%s", err, out)
	}
	return &rec, nil
}

// waitRestart waits for the newest restart of job to satisfy cond and returns its short ID.
func waitRestart(t *testing.T, ctx context.Context, e cliEnv, job string, cond func(*restart.Record) bool) string {
	t.Helper()
	var id string
	simtest.WaitFor(t, ctx, "the newest restart of "+job, func() bool {
		code, out, _ := e.run(ctx, "status", "-json", "-job="+job)
		var list []restart.Record
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) == 0 {
			return false
		}
		if cond(&list[0]) {
			id = list[0].ID[:8]
			return true
		}
		return false
	})
	return id
}

// assertMainRestarted checks that every running allocation's main task restarted want
// times.
func assertMainRestarted(t *testing.T, c *nomadsim.Cluster, jobID string, want uint64) {
	t.Helper()
	for id, tasks := range restarts(t, c, jobID) {
		if tasks["main"] != want {
			t.Errorf("alloc %s: main restarted %d times, want %d", id[:8], tasks["main"], want)
		}
	}
}

// assertRestartedOnce checks that every running allocation's main task restarted once.
func assertRestartedOnce(t *testing.T, c *nomadsim.Cluster, jobID string) {
	t.Helper()
	assertMainRestarted(t, c, jobID, 1)
}

// assertNoMutationsSince checks that no mutating request reached c since it had counted
// before.
func assertNoMutationsSince(t *testing.T, c *nomadsim.Cluster, before int64) {
	t.Helper()
	if after := c.Stats().Mutations; after != before {
		t.Fatalf("%d mutating requests reached Nomad", after-before)
	}
}

// runRefused runs a command, which must exit 1 saying want on stderr, in one line when
// oneLine; when sim is given, no mutating request may reach it.
func runRefused(t *testing.T, ctx context.Context, e cliEnv, sim *nomadsim.Cluster, oneLine bool, want string, args ...string) {
	t.Helper()
	var before int64
	if sim != nil {
		before = sim.Stats().Mutations
	}
	code, out, errOut := e.run(ctx, args...)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n"); oneLine && (len(lines) != 1 || strings.TrimSpace(lines[0]) == "") {
		t.Fatalf("want exactly one line on stderr, got %d:\n%s", len(lines), errOut)
	}
	if !strings.Contains(errOut, want) {
		t.Fatalf("stderr %q does not contain %q", errOut, want)
	}
	t.Logf("stderr: %s", strings.TrimSpace(errOut))
	if sim == nil {
		return
	}
	if after := sim.Stats().Mutations; after != before {
		t.Fatalf("%d mutating requests reached Nomad", after-before)
	}
}

// nomadRestarts is the restart records in client's Nomad, in Nomad Variables.
func nomadRestarts(client *api.Client) *nomadstore.Restarts {
	return nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
}

// nomadFleets is the fleet records in client's Nomad, in Nomad Variables, whose leases'
// locks wait lockDelay after their release (0: the store's default).
func nomadFleets(client *api.Client, lockDelay time.Duration) *nomadstore.Fleets {
	return nomadstore.NewFleets(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{LockDelay: lockDelay})
}

// nomadSchedules is the schedules in client's Nomad, in Nomad Variables.
func nomadSchedules(client *api.Client) *schedule.Store {
	return schedule.NewStore(nomadvars.New(client, nomadvars.Options{}), "")
}

// findInNomad finds restart id in the Nomad store, whose leases' locks wait lockDelay
// after their release (0: the store's default).
func findInNomad(t *testing.T, ctx context.Context, client *api.Client, id string, lockDelay time.Duration) (*nomadstore.Restarts, *restart.Record) {
	t.Helper()
	st := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{LockDelay: lockDelay})
	rec, err := st.Find(ctx, "", id)
	if err != nil {
		t.Fatalf("finding restart %s: %v", id, err)
	}
	return st, rec
}

// The steps of the fleet tests (`run -jobs` and steering fleets by ID).

// fleetJSON is a fleet as `status -json <fleet-id>` prints it.
type fleetJSON struct {
	Kind string
	fleet.Record
}

// registerFleetJobs registers n service jobs prefix-0..n-1 of count allocations in
// namespace ns ("" for default) and waits until they run.
func registerFleetJobs(t *testing.T, c *nomadsim.Cluster, ns, prefix string, n, count int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		job := simpleJob(id, api.JobTypeService, count)
		ids = append(ids, id)
		if ns == "" {
			register(t, c, job)
			continue
		}
		job.Namespace = &ns
		if _, err := c.RegisterJob(job); err != nil {
			t.Fatalf("registering %s/%s: %v", ns, id, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.WaitJobRunning(ctx, ns, id)
		cancel()
		if err != nil {
			t.Fatalf("waiting for %s/%s to run: %v", ns, id, err)
		}
	}
	return ids
}

var fleetIDRe = regexp.MustCompile(`Fleet ([0-9a-f]{8}) (?:created|is recorded)`)

// fleetIDIn returns the short fleet ID `run -jobs` printed.
func fleetIDIn(t *testing.T, out string) string {
	t.Helper()
	m := fleetIDRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no fleet ID in:\n%s", out)
	}
	return m[1]
}

// detachFleet records, with `run -detach -jobs` and the flags, a fleet of the jobs whose
// name starts with prefix-, which no one drives yet; it returns its short ID and what the
// command printed.
func detachFleet(t *testing.T, ctx context.Context, e cliEnv, prefix string, flags ...string) (string, string) {
	t.Helper()
	code, out, errOut := e.run(ctx, append([]string{"run", "-detach", "-jobs", fmt.Sprintf("Name matches %q", "^"+prefix+"-")}, flags...)...)
	if code != 0 {
		t.Fatalf("run -detach -jobs: exit %d\n%s\n%s", code, out, errOut)
	}
	return fleetIDIn(t, out), out
}

// runStarFleet runs a fleet of the jobs named f... of every namespace ('*'), two at once,
// which must restart 2 jobs; it returns the fleet, as `status -json` shows it, and what the
// command printed.
func runStarFleet(t *testing.T, ctx context.Context, e cliEnv) (*fleetJSON, string) {
	t.Helper()
	code, out, errOut := e.run(ctx, "run", "-namespace", "*", "-jobs", `Name matches "^f"`, "-max-parallel-jobs", "2", "-on-error=fail")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "Fleet restarted 2 jobs successfully!") {
		t.Fatalf("run -namespace '*' -jobs: exit %d", code)
	}
	return fleetOf(t, ctx, e, fleetIDIn(t, out)), out
}

// fleetOf reads a fleet with `status -json <id>`.
func fleetOf(t *testing.T, ctx context.Context, e cliEnv, id string) *fleetJSON {
	t.Helper()
	code, out, errOut := e.run(ctx, "status", "-json", id)
	if code != 0 {
		t.Fatalf("status -json %s: exit %d\n%s\n%s", id, code, out, errOut)
	}
	var f fleetJSON
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("status -json %s: %v\n%s", id, err, out)
	}
	if f.Kind != "fleet" {
		t.Fatalf("status -json %s: Kind %q, want fleet", id, f.Kind)
	}
	return &f
}

// checkFleetOnce checks from Nomad's facts that every planned allocation of each job the
// fleet restarted was restarted exactly once, and returns the jobs' restart windows.
func checkFleetOnce(t *testing.T, ctx context.Context, c *nomadsim.Cluster, e cliEnv, f *fleetJSON) []simtest.Window {
	t.Helper()
	client := adminClient(t, c)
	var windows []simtest.Window
	for _, j := range f.Jobs {
		if j.Status != fleet.JobSucceeded {
			continue
		}
		child := statusOf(t, ctx, e, j.RestartID)
		if child.Fleet != f.ID {
			t.Errorf("restart %s of job %s says fleet %q, want %q", j.RestartID, j.JobID, child.Fleet, f.ID)
		}
		var ids []string
		for _, a := range child.Allocs {
			ids = append(ids, a.ID)
		}
		simtest.CheckOnce(t, client, j.Namespace, j.JobID, ids, false, 30*time.Second)
		w, err := simtest.RestartWindow(ctx, client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
	}
	return windows
}

// statusEntry is one entry of `status -json`'s list.
type statusEntry struct {
	ID, Kind, Status, Fleet string
	Jobs                    []struct{ Namespace, JobID, RestartID, Status string }
}

// waitFirstJobRunning waits until `status -json` lists a fleet whose first job runs, and
// returns the fleet's short ID (the tests that use it run one fleet).
func waitFirstJobRunning(t *testing.T, ctx context.Context, e cliEnv) string {
	t.Helper()
	var id string
	simtest.WaitFor(t, ctx, "a fleet's first job to run", func() bool {
		code, out, _ := e.run(ctx, "status", "-json")
		var list []statusEntry
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			return false
		}
		for _, en := range list {
			if en.Kind == "fleet" && len(en.Jobs) > 0 && en.Jobs[0].Status == "running" {
				id = en.ID[:8]
				return true
			}
		}
		return false
	})
	return id
}

// The cluster of the watches tests: jobs opted in to config-change rollouts, the
// variables and Consul keys they read, and their rollouts.

// templated adds a template to the first task of job's first group.
func templated(job *api.Job, dest, body, changeMode string) *api.Job {
	task := job.TaskGroups[0].Tasks[0]
	task.Templates = append(task.Templates, &api.Template{EmbeddedTmpl: &body, DestPath: &dest, ChangeMode: &changeMode})
	return job
}

// watchesJobs are the jobs of the watches tests, registered on one cluster:
//   - web opts in at job level with batch-size 2 at group level, and reads one variable
//     with the default delimiters and one with its own, both with change_mode noop;
//   - web-plain reads a Consul key in another datacenter and a Vault secret but has not
//     opted in;
//   - web-bad opts in with an invalid batch size and an option in a task's meta;
//   - web-loud opts in with change_mode restart.
func watchesJobs() []*api.Job {
	web := templated(simpleJob("web", api.JobTypeService, 3), "local/app.env",
		`{{ with nomadVar "nomad/jobs/web/config" }}PORT={{ .port }}{{ end }}`, "noop")
	left, right := "[[", "]]"
	web = templated(web, "local/extra.env", `[[ with nomadVar "nomad/jobs/web/extra" ]]X=[[ .x ]][[ end ]]`, "noop")
	web.TaskGroups[0].Tasks[0].Templates[1].LeftDelim, web.TaskGroups[0].Tasks[0].Templates[1].RightDelim = &left, &right
	web.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	web.TaskGroups[0].Meta = map[string]string{onchange.KeyBatchSize: "2"}

	plain := templated(simpleJob("web-plain", api.JobTypeService, 1), "local/app.env",
		`{{ key "web/config@dc2" }}{{ with secret "secret/db" }}{{ .Data.password }}{{ end }}`, "noop")

	bad := templated(simpleJob("web-bad", api.JobTypeService, 1), "local/app.env", `{{ nomadVar "nomad/jobs/web-bad" }}`, "noop")
	bad.TaskGroups[0].Meta = map[string]string{onchange.KeyOnChange: "auto", onchange.KeyBatchSize: "zero"}
	bad.TaskGroups[0].Tasks[0].Meta = map[string]string{onchange.KeySurge: "1"}

	loud := templated(simpleJob("web-loud", api.JobTypeService, 2), "local/app.env", `{{ nomadVar "nomad/jobs/web-loud" }}`, "restart")
	loud.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	return []*api.Job{web, plain, bad, loud}
}

// kvJob opts in and reads one Consul key.
func kvJob() *api.Job {
	job := templated(simpleJob("web-kv", api.JobTypeService, 1), "local/app.env", `{{ key "web/config" }}`, "noop")
	job.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	return job
}

// listJob opts in and lists the variables under nomad/jobs/web/.
func listJob() *api.Job {
	job := templated(simpleJob("web-list", api.JobTypeService, 1), "local/all.env",
		`{{ range nomadVarList "nomad/jobs/web/" }}{{ .Path }} {{ end }}`, "noop")
	job.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	return job
}

// writeVariable writes a variable as an operator would, and returns its metadata.
func writeVariable(t *testing.T, client *api.Client, path, value string) *api.VariableMetadata {
	t.Helper()
	v, _, err := client.Variables().Create(&api.Variable{Path: path, Items: api.VariableItems{"port": value}}, nil)
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return v.Metadata()
}

// fileRollout files a restart of job through the engine and the Nomad store, as a
// rollout would: with triggers, or none for an operator's restart; a finished one
// (status end) frees the job for the next.
func fileRollout(ctx context.Context, t *testing.T, client *api.Client, job string, triggers []restart.Trigger, end restart.Status) *restart.Record {
	t.Helper()
	st := nomadRestarts(client)
	e := engine.New(engine.Config{Cluster: cluster.NewNomad(client), Store: st})
	p, err := e.Plan(ctx, engine.Request{Job: job, Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}})
	if err != nil {
		t.Fatalf("planning a restart of %s: %v", job, err)
	}
	p.Record.Triggers = triggers
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatalf("filing a restart of %s: %v", job, err)
	}
	if end != "" {
		p.Record.Status = end
		if err := st.Update(ctx, p.Record); err != nil {
			t.Fatalf("ending the restart of %s: %v", job, err)
		}
	}
	return p.Record
}

// consulIndex is a Consul key's ModifyIndex as Consul's API answers it.
func consulIndex(t *testing.T, addr, key string) uint64 {
	t.Helper()
	cfg := consulapi.DefaultNonPooledConfig()
	cfg.Address = addr
	client, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pair, _, err := client.KV().Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("reading Consul key %s: %v (found %v)", key, err, pair != nil)
	}
	return pair.ModifyIndex
}

// watchesFixture is a cluster whose watched variable was written twice, whose other
// watched variable is missing, whose Consul key was written twice, and whose job web has
// a finished rollout followed by an operator's restart.
type watchesFixture struct {
	c        *nomadsim.Cluster
	e        cliEnv
	config   *api.VariableMetadata // the newest write of nomad/jobs/web/config
	under    *api.VariableMetadata // the newest write under nomad/jobs/web/ (config2)
	first    uint64                // the index of its first write
	kvIndex  uint64
	rollout  *restart.Record
	operator *restart.Record
}

func newWatchesFixture(t *testing.T) watchesFixture {
	t.Helper()
	jobs := watchesJobs()
	c, e := startSimEnv(t, nomadsim.Options{}, jobs[0], jobs[3], kvJob(), listJob())
	e.consul = c.ConsulAddr()
	admin := adminClient(t, c)
	ctx := testCtx(t)
	f := watchesFixture{c: c, e: e}
	f.first = writeVariable(t, admin, "nomad/jobs/web/config", "8080").ModifyIndex
	// A variable that sorts right after it and that the exact source must not count.
	writeVariable(t, admin, "nomad/jobs/web/config2", "1")
	f.config = writeVariable(t, admin, "nomad/jobs/web/config", "9090")
	f.under = writeVariable(t, admin, "nomad/jobs/web/config2", "2")
	// Outside the prefix, though it shares its first letters.
	writeVariable(t, admin, "nomad/jobs/web-other", "3")
	c.ConsulKVPut("web/config", "a")
	c.ConsulKVPut("web/config", "b")
	f.kvIndex = consulIndex(t, c.ConsulAddr(), "web/config")
	trigger := restart.Trigger{Source: "nomad:nomad/jobs/web/config", OldIndex: f.first, NewIndex: f.config.ModifyIndex, ChangedAt: time.Unix(0, f.config.ModifyTime)}
	f.rollout = fileRollout(ctx, t, admin, "web", []restart.Trigger{trigger}, restart.StatusSucceeded)
	f.operator = fileRollout(ctx, t, admin, "web", nil, "") // newer, but no config change started it
	return f
}
