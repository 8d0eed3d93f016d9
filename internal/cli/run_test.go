package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The scenarios of Nomad's own tests of `nomad job restart` (command/job_restart_test.go),
// run through the CLI against nomadsim, for a service and a batch job.

func TestRunScenarios(t *testing.T) {
	type expect struct {
		restarted map[string][]string // group -> tasks restarted once (others: never)
		groups    map[string]int      // group -> allocations restarted
	}
	all := map[string][]string{"single_task": {"main"}, "multiple_tasks": {"main", "sidecar"}}
	cases := []struct {
		name     string
		args     []string
		want     expect
		contains []string
	}{
		{"default restarts running tasks in batches of 3 and 2", []string{"-batch-size=3"},
			expect{restarted: all, groups: map[string]int{"single_task": 3, "multiple_tasks": 2}},
			[]string{"Restarting 5 allocations", "Restarting 1st batch of 3 allocations", "Restarting 2nd batch of 2 allocations"}},
		{"50% rounds up", []string{"-batch-size=50%"},
			expect{restarted: all, groups: map[string]int{"single_task": 3, "multiple_tasks": 2}},
			[]string{"1st batch of 3 allocations", "2nd batch of 2 allocations"}},
		{"task main only", []string{"-batch-size=100%", "-task=main"},
			expect{restarted: map[string][]string{"single_task": {"main"}, "multiple_tasks": {"main"}}, groups: map[string]int{"single_task": 3, "multiple_tasks": 2}},
			[]string{`"main" in allocation`}},
		{"group single_task only", []string{"-batch-size=100%", "-group=single_task"},
			expect{restarted: map[string][]string{"single_task": {"main"}}, groups: map[string]int{"single_task": 3}},
			[]string{"Restarting 3 allocations"}},
		{"all tasks reruns the prestart task", []string{"-batch-size=100%", "-all-tasks", "-group=multiple_tasks"},
			expect{restarted: map[string][]string{"multiple_tasks": {"main", "sidecar", "prestart"}}, groups: map[string]int{"multiple_tasks": 2}},
			[]string{"Restarting all tasks in allocation"}},
	}
	for _, typ := range []string{api.JobTypeService, api.JobTypeBatch} {
		for _, tc := range cases {
			t.Run(typ+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				c, e := startSimEnv(t, nomadsim.Options{}, testJob("example", typ))
				before := allocsOf(t, c, "example")
				args := append([]string{"run", "-on-error=fail"}, tc.args...)
				code, out, errOut := e.run(testCtx(t), append(args, "example")...)
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
				for _, s := range tc.contains {
					if !strings.Contains(out, s) {
						t.Errorf("output lacks %q:\n%s", s, out)
					}
				}
				if !strings.Contains(out, "Job restarted successfully!") {
					t.Errorf("no success line:\n%s", out)
				}
				after := allocsOf(t, c, "example")
				if len(after) != len(before) {
					t.Fatalf("in place: %d allocations before, %d after", len(before), len(after))
				}
				count := map[string]int{}
				for _, a := range after {
					want := map[string]bool{}
					for _, task := range tc.want.restarted[a.TaskGroup] {
						want[task] = true
					}
					restartedAny := false
					for task, ts := range a.TaskStates {
						// Restart Signaled events count restarts of tasks that had
						// finished too (-all-tasks), which the Restarts counter does not.
						n := 0
						for _, ev := range ts.Events {
							if ev.Type == api.TaskRestartSignal {
								n++
							}
						}
						if want[task] && n != 1 || !want[task] && n != 0 {
							t.Errorf("alloc %s group %s task %s restarted %d times, want %v", a.ID[:8], a.TaskGroup, task, n, want[task])
						}
						restartedAny = restartedAny || n > 0
					}
					if restartedAny {
						count[a.TaskGroup]++
					}
				}
				for g, n := range tc.want.groups {
					if count[g] != n {
						t.Errorf("group %s: %d allocations restarted, want %d", g, count[g], n)
					}
				}
			})
		}
	}
}

func TestRunPrestartTaskNotRunning(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, testJob("example", api.JobTypeService))
	code, out, errOut := e.run(testCtx(t), "run", "-yes", "-batch-size=100%", "-task=prestart", "example")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "Task not running") {
		t.Fatalf("stderr lacks Task not running:\n%s", errOut)
	}
	for id, tasks := range restarts(t, c, "example") {
		for task, n := range tasks {
			if n != 0 {
				t.Errorf("alloc %s task %s restarted %d times", id[:8], task, n)
			}
		}
	}
}

func TestRunReschedule(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, testJob("example", api.JobTypeService))
	before := allocsOf(t, c, "example")
	code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", "-reschedule", "-batch-size=3", "example")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, s := range []string{"1st batch of 3", "2nd batch of 2", "Rescheduling allocation", "replaced by"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "Waiting ") && strings.Contains(out, "before restarting the next batch") {
		t.Errorf("no batch wait was asked for:\n%s", out)
	}
	byID := map[string]*api.Allocation{}
	for _, a := range allocsOf(t, c, "example") {
		byID[a.ID] = a
	}
	for _, a := range before {
		now := byID[a.ID]
		if now == nil || now.NextAllocation == "" {
			t.Fatalf("allocation %s was not replaced", a.ID[:8])
		}
		if next := byID[now.NextAllocation]; next == nil || next.ClientStatus != api.AllocClientStatusRunning || next.NextAllocation != "" {
			t.Errorf("replacement of %s is not a running allocation", a.ID[:8])
		}
	}
}

func TestRunSystemJobReschedule(t *testing.T) {
	job := simpleJob("sys", api.JobTypeSystem, 1)
	job.Datacenters = []string{"dc1", "dc2", "dc3"}
	_, e := startSimEnv(t, nomadsim.Options{NodesPerDatacenter: 1, Datacenters: []string{"dc1", "dc2", "dc3"}}, job)
	code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", "-reschedule", "sys")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "Restarting 3 allocations") || strings.Count(out, "Rescheduling allocation") != 3 || strings.Count(out, "replaced by") < 3 {
		t.Fatalf("output:\n%s", out)
	}
}

func TestRunNoAllocations(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	job := simpleJob("nowhere", api.JobTypeService, 2)
	job.Datacenters = []string{"dc-that-does-not-exist"}
	if _, err := c.RegisterJob(job); err != nil {
		t.Fatal(err)
	}
	e := newCLIEnv(t, c)
	before := c.Stats().Mutations
	code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", "nowhere")
	if code != 0 || !strings.Contains(out, "No allocations to restart") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if c.Stats().Mutations != before {
		t.Fatal("nothing to restart must change nothing")
	}
}

func TestRunActiveDeploymentRefused(t *testing.T) {
	job := simpleJob("canary", api.JobTypeService, 2)
	job.TaskGroups[0].Update = &api.UpdateStrategy{MaxParallel: intp(1), Canary: intp(1), AutoPromote: boolp(false)}
	c, e := startSimEnv(t, nomadsim.Options{}, job)
	job.TaskGroups[0].Tasks[0].Meta = map[string]string{"version": "2"}
	if _, err := c.RegisterJob(job); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", "canary")
	if code != 1 || !regexp.MustCompile(`Deployment .+ is "running"`).MatchString(errOut) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestRunSurgePastJobMaxCountRefused: `run -surge` past the servers' job_max_count (read
// from the agent's configuration; unset, Nomad's default of 50000) is refused at planning,
// in one line that names the limit and the fix, with exit 1: nothing is recorded, nothing
// changes in the cluster.
func TestRunSurgePastJobMaxCountRefused(t *testing.T) {
	c, e, ctx := startWebEnv(t, 2)
	runRefused(t, ctx, e, c, true, `-surge 100000000 would take job "web" to 100000002 allocations in all, past the 50000 its Nomad servers allow (job_max_count); lower -surge to at most 49998`,
		"run", "-on-error", "fail", "-surge", "100000000", "web")
	runRefused(t, ctx, e, c, true, `lower -surge to at most 49998`,
		"run", "-state=local", "-on-error", "fail", "-surge", "49999", "web")
	if recs := e.localRecords(t, ctx, ""); len(recs) != 0 {
		t.Fatalf("local store: %d records, want none", len(recs))
	}
	if _, out, _ := e.run(ctx, "status"); strings.Contains(out, "web") {
		t.Errorf("status lists a restart of web:\n%s", out)
	}
}

// TestRunSurgeLimitLearntAtScale: with a token that may not read the agent's configuration
// (no agent:read), job_max_count is unknown at planning; Nomad's refusal of the scale-up
// (a 500, permanent) then fails the restart at once with Nomad's text and the fix, rather
// than being retried as a passing failure: nothing was restarted, the count is as it was.
func TestRunSurgeLimitLearntAtScale(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true, JobMaxCount: new(3)})
	register(t, c, simpleJob("web", api.JobTypeService, 2))
	e := newCLIEnvAs(t, c, "surger", `namespace "default" { capabilities = ["read-job", "list-jobs", "alloc-lifecycle", "scale-job"] }`)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-state=local", "-on-error", "fail", "-yes", "-surge", "2", "web")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{"total count was greater than configured job_max_count: 4 > 3", "lower -surge to at most 1", "raise the servers' job_max_count"} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	recs := e.localRecords(t, ctx, "")
	if len(recs) != 1 {
		t.Fatalf("local store: %d records, want 1", len(recs))
	}
	rec := recs[0]
	if rec.Status != restart.StatusFailed || !strings.Contains(rec.Reason, "job_max_count: 4 > 3") || strings.Contains(rec.Reason, "\n") {
		t.Errorf("record %s %q, want failed in one line with Nomad's text", rec.Status, rec.Reason)
	}
	for _, a := range rec.Allocs {
		if a.State != restart.AllocPending {
			t.Errorf("allocation %s is %s, want untouched", a.ID, a.State)
		}
	}
	job, _, err := adminClient(t, c).Jobs().Info("web", nil)
	if err != nil || *job.TaskGroups[0].Count != 2 || *job.Version != 0 {
		t.Errorf("job after the refusal: count %d version %d (%v), want 2 and version 0", *job.TaskGroups[0].Count, *job.Version, err)
	}
}

func TestRunOnErrorFailStopsAfterFailingRestart(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("three", api.JobTypeService, 3))
	// The second allocation in restart order (newest first) fails to restart.
	failRestartOf(c, allocsOf(t, c, "three")[1])
	c.ResetStats()
	code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", "three")
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if n := requests(c.Stats(), "/v1/client/allocation/:id/restart"); n != 2 {
		t.Fatalf("%d restart requests, want 2 (stop after the failing one)\n%s\n%s", n, out, errOut)
	}
	if !strings.Contains(errOut, "injected failure") {
		t.Fatalf("stderr lacks the error:\n%s", errOut)
	}
}

func TestRunJSON(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, simpleJob("js", api.JobTypeService, 2))
	code, out, errOut := e.run(testCtx(t), "run", "-json", "-on-error=fail", "js")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 3 {
		t.Fatalf("too few lines:\n%s", out)
	}
	var lastSeq uint64
	for _, l := range lines[:len(lines)-1] {
		var ev restart.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Type == "" {
			t.Fatalf("not an event: %q (%v)", l, err)
		}
		if ev.Seq <= lastSeq {
			t.Fatalf("events out of order or repeated at %q", l)
		}
		lastSeq = ev.Seq
	}
	var rec restart.Record
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Status != restart.StatusSucceeded || len(rec.Allocs) != 2 || rec.JobID != "js" {
		t.Fatalf("final record: %+v", rec)
	}
}

// failRestartOf makes Nomad answer every restart of allocation a with an error.
func failRestartOf(c *nomadsim.Cluster, a *api.Allocation) {
	c.SetFault(nomadsim.Fault{Path: "/v1/client/allocation/" + a.ID + "/restart", Status: 400, Body: "injected failure"})
}

func intp(i int) *int    { return &i }
func boolp(b bool) *bool { return &b }

func TestInteractivePromptsWithTheEngine(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 3))
	// First question: an invalid answer, asked again, then yes; second question: no.
	code, out, errOut := e.runIn(testCtx(t), strings.NewReader("maybe\ny\nn\n"), true, "run", "-batch-wait=ask", "web")
	if code != 0 {
		t.Fatalf(`"no" before any error exits 0 as in Nomad; got %d\n%s\n%s`, code, out, errOut)
	}
	if n := strings.Count(out, "Proceed with the next batch? [Y/n/<wait duration>] "); n < 3 {
		t.Fatalf("want the prompt 3 times (asked again after the invalid answer), got %d:\n%s", n, out)
	}
	if !strings.Contains(out, strings.Repeat(" ", 31)+`Invalid answer "maybe"`) || !strings.Contains(out, "Job restart canceled") {
		t.Fatalf("output:\n%s", out)
	}
	restarted := 0
	for _, tasks := range restarts(t, c, "web") {
		restarted += int(tasks["main"])
	}
	if restarted != 2 {
		t.Fatalf("%d restarts, want 2 (the third batch was declined)", restarted)
	}
}

func TestMultiRegionQuestion(t *testing.T) {
	job := simpleJob("mr", api.JobTypeService, 1)
	job.Multiregion = &api.Multiregion{Regions: []*api.MultiregionRegion{{Name: "global"}, {Name: "east"}}}
	c, e := startSimEnv(t, nomadsim.Options{}, job)
	before := c.Stats().Mutations
	code, out, errOut := e.runIn(testCtx(t), strings.NewReader("n\n"), true, "run", "mr")
	if code != 0 || !strings.Contains(out, `Are you sure you want to restart multi-region job "mr" in a single region? [y/N]`) || !strings.Contains(out, "Job restart canceled.") {
		t.Fatalf("declined: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(testCtx(t), "run", "-on-error=fail", "mr")
	if code != 1 || !strings.Contains(errOut, "confirm with -yes") {
		t.Fatalf("off a terminal: exit %d\n%s\n%s", code, out, errOut)
	}
	if c.Stats().Mutations != before {
		t.Fatal("a declined multi-region restart changed the cluster")
	}
	code, out, errOut = e.run(testCtx(t), "run", "-yes", "mr")
	if code != 0 || strings.Contains(out, "Are you sure") {
		t.Fatalf("-yes: exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestInteractiveOnErrorAsk(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 3))
	failRestartOf(c, allocsOf(t, c, "web")[0])
	// An empty answer takes the default of the error question: no.
	code, out, errOut := e.runIn(testCtx(t), strings.NewReader("\n"), true, "run", "web")
	if !strings.Contains(out, "Ignore the errors above and proceed with the next batch? [y/N] ") {
		t.Fatalf("no error question:\n%s\n%s", out, errOut)
	}
	// The empty answer declined: the restart is canceled after the first batch, with an
	// error, so the exit code is 1 as in Nomad.
	if code != 1 || !strings.Contains(out, "Job restart canceled") || !strings.Contains(errOut, "injected failure") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	assertMainRestarted(t, c, "web", 0) // the restart was declined
}

func TestVerboseShowsSkippedAllocations(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, testJob("example", api.JobTypeService))
	code, out, errOut := e.run(testCtx(t), "run", "-verbose", "-on-error=fail", "-batch-size=100%", "-group=single_task", "example")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if n := strings.Count(out, "Skipping allocation"); n != 2 {
		t.Fatalf("want 2 skipped allocations of group multiple_tasks, got %d:\n%s", n, out)
	}
	if !regexp.MustCompile(`Restart [0-9a-f-]{36} of job`).MatchString(out) {
		t.Fatalf("-verbose must print full IDs:\n%s", out)
	}
}

// TestCtrlCDetachesAndResumeFinishesExactlyOnce interrupts a driving `run` (as Ctrl-C or
// SIGTERM do through the context), then resumes the restart from another command: every
// allocation is restarted exactly once.
func TestCtrlCDetachesAndResumeFinishesExactlyOnce(t *testing.T) {
	// Nomad's time at 5, not simtest's 50: slow enough that the interrupt lands while the
	// run is still in its batches, leaving some allocations for resume.
	c, e := startSimEnv(t, nomadsim.Options{TimeScale: 5}, simpleJob("web", api.JobTypeService, 5))
	ctx := testCtx(t)
	runCtx, interrupt := context.WithCancel(ctx)
	done := e.start(runCtx, "run", "-on-error=fail", "web")
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.CurrentBatch >= 2 })
	interrupt()
	r := <-done
	if r.code != 1 || !regexp.MustCompile("Detached from restart [0-9a-f]{8}; it is not running now. Resume it with `nomad-restart resume [0-9a-f]{8}`").MatchString(r.err) {
		t.Fatalf("detach: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	id, _ := createdID(t, r.out)
	rec := statusOf(t, ctx, e, id)
	if rec.Status.Terminal() {
		t.Fatalf("detached restart is %s", rec.Status)
	}
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", code, out, errOut)
	}
	assertRestartedOnce(t, c, "web")
}

// TestRunHealthChecks runs `run` on a job whose Consul check passes 6s (Nomad's time)
// after each start: with Consul reachable the restart waits for it and says so; -health
// running needs no Consul; a check that never passes fails at the group's deadline.
func TestRunHealthChecks(t *testing.T) {
	// 6s of Nomad's time is 300ms of real time: long enough for a loaded machine to see
	// the check failing first.
	c, e := startSimEnv(t, nomadsim.Options{},
		checkedJob("late", 2, "pass_after=6s", 500*time.Millisecond, time.Minute),
		checkedJob("broken", 2, "pass", 500*time.Millisecond, 4*time.Second))
	ctx := testCtx(t)

	e.consul = c.ConsulAddr()
	code, out, errOut := e.run(ctx, "run", "-on-error=fail", "-state=local", "late")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{`waits for: check ready`, "is healthy again"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	noConsul := newCLIEnv(t, c)
	code, out, errOut = noConsul.run(ctx, "run", "-on-error=fail", "-state=local", "-health=running", "late")
	if code != 0 || strings.Contains(out, "check ready") {
		t.Fatalf("-health running: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// Every allocation fails its check: with the default budget (the batch size, 1) the
	// other one's failing check holds the batch back (the budget counts it); a budget of
	// 2 lets the batch start, and the restarted allocation fails at the deadline.
	c.ScriptCheck("default", "broken", "ready", "fail")
	// Consul runs each check on its interval: the budget sees "critical" only once both
	// checks have run since.
	awaitConsulChecks(t, ctx, c.ConsulAddr(), "broken-http", consulapi.HealthCritical, 2)
	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "broken")
	if code != 1 || !strings.Contains(out+errOut, "failing its health checks") {
		t.Fatalf("exit %d, want 1 naming the failing checks\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "-max-unavailable=2", "broken")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out+errOut, "not healthy within the healthy deadline of 4s") {
		t.Errorf("output does not give the deadline's reason:\n%s\n%s", out, errOut)
	}
}

// awaitConsulChecks waits until Consul reports n checks of service, all in status.
func awaitConsulChecks(t *testing.T, ctx context.Context, addr, service, status string, n int) {
	t.Helper()
	client, err := consulapi.NewClient(&consulapi.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, ctx, fmt.Sprintf("%d checks of %s %s in Consul", n, service, status), func() bool {
		checks, _, err := client.Health().Checks(service, (&consulapi.QueryOptions{}).WithContext(ctx))
		if err != nil || len(checks) != n {
			return false
		}
		for _, c := range checks {
			if c.Status != status {
				return false
			}
		}
		return true
	})
}

// TestRunHealthChecksWithLifecycleTasks gates a group with a finished prestart task and a
// poststart sidecar on a Nomad-native check, in place with -all-tasks and with
// -reschedule: the finished prestart task is done, not waited for.
func TestRunHealthChecksWithLifecycleTasks(t *testing.T) {
	job := testJob("life", "service")
	for _, tg := range job.TaskGroups {
		if *tg.Name != "multiple_tasks" {
			continue
		}
		tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
		tg.Services = []*api.Service{{Name: "life-http", PortLabel: "http", Provider: "nomad",
			Checks: []api.ServiceCheck{{Name: "alive", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta = map[string]string{"nomadsim.check.alive": "pass_after=2s"}
		tg.Update.MinHealthyTime = new(500 * time.Millisecond)
		tg.Update.HealthyDeadline = new(time.Minute)
	}
	_, e := startSimEnv(t, nomadsim.Options{}, job)
	ctx := testCtx(t)
	for _, args := range [][]string{{"-all-tasks"}, {"-reschedule"}} {
		full := append(append([]string{"run", "-on-error=fail", "-state=local", "-group=multiple_tasks", "-health=checks"}, args...), "life")
		code, out, errOut := e.run(ctx, full...)
		if code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
		if !strings.Contains(out, "alive") {
			t.Errorf("%v: the output never names the check it waits for:\n%s", args, out)
		}
	}
}

// TestACLCombinations follows Nomad's ACL tests of `nomad job restart`, plus where the
// record goes with -state auto.
func TestACLCombinations(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	register(t, c, simpleJob("secure", api.JobTypeService, 2))
	n := 0
	token := func(rules string) string {
		t.Helper()
		n++
		name := fmt.Sprintf("policy-%d", n)
		s, err := c.CreateToken("token-"+name, map[string]string{name: rules})
		if err != nil {
			t.Fatalf("token %q: %v", rules, err)
		}
		return s
	}
	ns := func(caps string, extra string) string {
		return `namespace "default" { capabilities = [` + caps + `] ` + extra + ` }`
	}
	vars := `variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } }`
	cases := []struct {
		name  string
		token string
		job   string
		code  int
		want  string
	}{
		{"no token", "", "secure", 1, "Permission denied"},
		{"alloc-lifecycle alone", token(ns(`"alloc-lifecycle"`, "")), "secure", 1, "Permission denied"},
		{"read-job alone", token(ns(`"read-job"`, "")), "secure", 1, `needs the alloc-lifecycle capability in namespace "default"`},
		{"alloc-lifecycle and read-job, record kept locally", token(ns(`"alloc-lifecycle", "read-job"`, "")), "secure", 0, "(state: local)"},
		{"prefix without list-jobs", token(ns(`"alloc-lifecycle", "read-job"`, "")), "secu", 1, "No job(s) with prefix or ID"},
		{"prefix with list-jobs", token(ns(`"alloc-lifecycle", "read-job", "list-jobs"`, "")), "secu", 0, "Job restarted successfully!"},
		{"variables write, record in Nomad", token(ns(`"alloc-lifecycle", "read-job"`, vars)), "secure", 0, "(state: nomad)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLIEnv(t, c)
			e.token = tc.token
			code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", tc.job)
			t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d (want %d), want %q in:\n%s\n%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}

// Fleet restarts: `run -jobs` drives the jobs a filter selects, a few at a time.

// TestFleetRunToSuccess drives a fleet of 6 jobs, 2 at a time, in the foreground: every
// allocation is restarted exactly once, never more than 2 jobs restart at once (from
// Nomad's facts), a job the filter leaves out is not touched, and status shows it all.
func TestFleetRunToSuccess(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "fl", 6, 2)
	register(t, c, simpleJob("other", api.JobTypeService, 2))
	ctx := testCtx(t)

	code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^fl-"`, "-max-parallel-jobs", "2", "-on-error=fail")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "Fleet restarted 6 jobs successfully!") || errOut != "" {
		t.Fatalf("run -jobs: exit %d", code)
	}
	for _, want := range []string{"[fl-0] ", "[fl-5] ", "at most 2 at once"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	id := fleetIDIn(t, out)
	f := fleetOf(t, ctx, e, id)
	if f.Status != restart.StatusSucceeded || len(f.Jobs) != 6 || f.Counts()[fleet.JobSucceeded] != 6 {
		t.Fatalf("fleet: status %s, jobs %v", f.Status, f.Counts())
	}
	windows := checkFleetOnce(t, ctx, c, e, f)
	if peak := simtest.PeakOverlap(windows); peak > 2 {
		t.Errorf("%d jobs restarted at once, want at most 2 (windows %v)", peak, windows)
	}
	assertMainRestarted(t, c, "other", 0)

	code, out, _ = e.run(ctx, "status", id)
	t.Logf("status %s:\n%s", id, out)
	if code != 0 || !strings.Contains(out, "6 selected: 6 done, 0 running") || !strings.Contains(out, "12/12 restarted in the 6 jobs started") {
		t.Errorf("status %s: exit %d\n%s", id, code, out)
	}
	code, out, _ = e.run(ctx, "status", f.Jobs[0].RestartID[:8])
	if code != 0 || !strings.Contains(out, "Fleet") || !strings.Contains(out, id) {
		t.Errorf("status of a child: exit %d, want its fleet %s named\n%s", code, id, out)
	}
}

// TestFleetCtrlCDetachesAndResumeFinishes stops a foreground fleet mid-way (Ctrl-C): it
// says how to resume, and `resume` finishes it with every allocation restarted once.
func TestFleetCtrlCDetachesAndResumeFinishes(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "cc", 3, 2)
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	driver := e.start(runCtx, "run", "-jobs", `Name matches "^cc-"`, "-on-error=fail", "-batch-wait=1s")
	id := waitFirstJobRunning(t, ctx, e)
	interrupt()
	r := <-driver
	if r.code != 1 || !strings.Contains(r.err, "Detached from fleet "+id) || !strings.Contains(r.err, "nomad-restart resume "+id) {
		t.Fatalf("Ctrl-C: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if f := fleetOf(t, ctx, e, id); f.Status.Terminal() {
		t.Fatalf("a detached fleet ended: %s", f.Status)
	}
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 || !strings.Contains(out, "Fleet restarted 3 jobs successfully!") {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	checkFleetOnce(t, ctx, c, e, fleetOf(t, ctx, e, id))
}

// TestFleetFailedJobStopsTheFleet runs a fleet whose first job's tasks fail to start again:
// the first failure stops the fleet (-max-failed-jobs 0, -on-error fail) and run exits 1
// naming the failed and canceled jobs. The dry run names a problem planning finds.
func TestFleetFailedJobStopsTheFleet(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "ft", 3, 1)
	code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^ft-"`, "-task=nosuch", "-dry-run")
	if code != 0 || !strings.Contains(out, `task "nosuch"`) || !strings.Contains(out, "3 jobs would not restart now") {
		t.Errorf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}

	// A job whose restart cannot even be planned fails at its turn, and stops the fleet too.
	code, out, errOut = e.run(ctx, "run", "-jobs", `Name matches "^ft-"`, "-task=nosuch", "-on-error=fail")
	if code != 1 || !strings.Contains(errOut, `* job "ft-0" (namespace "default") failed: task "nosuch" not found`) {
		t.Errorf("run with a task no job has: exit %d\n%s\n%s", code, out, errOut)
	}

	c.FailTaskStarts("default", "ft-0", "main", 100)
	code, out, errOut = e.run(ctx, "run", "-jobs", `Name matches "^ft-"`, "-on-error=fail", "-healthy-deadline=1m")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 1 || !strings.Contains(errOut, "failed") || !strings.Contains(errOut, `* job "ft-0" (namespace "default") failed`) ||
		!strings.Contains(errOut, `* job "ft-2" (namespace "default") canceled`) {
		t.Fatalf("run: exit %d", code)
	}
	f := fleetOf(t, ctx, e, fleetIDIn(t, out))
	if f.Status != restart.StatusFailed || f.Counts()[fleet.JobFailed] != 1 || f.Counts()[fleet.JobCanceled] != 2 {
		t.Errorf("fleet: %s %v", f.Status, f.Counts())
	}
	for _, job := range []string{"ft-1", "ft-2"} {
		assertMainRestarted(t, c, job, 0)
	}
}

// TestFleetBadSelections runs every kind of wrong fleet command line and checks that each
// gives exit 1, exactly one line on stderr naming the problem, no mutating request to
// Nomad, no variable written and no allocation restarted.
func TestFleetBadSelections(t *testing.T) {
	// A job whose meta names its upstreams in a way no one can read.
	badAfter := simpleJob("badmeta-web", api.JobTypeService, 1)
	badAfter.Meta = map[string]string{"nomad-restart.after": "mix-web mix-batch"}
	c, e := startSimEnv(t, nomadsim.Options{},
		simpleJob("mix-web", api.JobTypeService, 2), simpleJob("mix-batch", api.JobTypeBatch, 1), simpleJob("mix-sb", api.JobTypeSysbatch, 1), badAfter)
	ctx := testCtx(t)
	future := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name string
		args []string
		want string // a part of the one stderr line
	}{
		{"bad expression", []string{"-jobs", `Name ==`}, `Invalid -jobs expression "Name =="`},
		{"unknown field", []string{"-jobs", `Nope == "x"`}, `Invalid -jobs expression`},
		{"zero jobs", []string{"-jobs", `Name == "nosuch"`}, `selected no job in namespace "default"`},
		{"zero jobs across namespaces", []string{"-namespace", "*", "-jobs", `Name == "nosuch"`}, `selected no job in namespace "*"`},
		{"surge on a batch job", []string{"-jobs", `Name matches "^mix-"`, "-surge", "1"}, `-surge scales service jobs only`},
		{"reschedule on a sysbatch job", []string{"-jobs", `Name matches "^mix-"`, "-reschedule"}, `"sysbatch" are not allowed to be rescheduled`},
		{"state local", []string{"-jobs", `Name matches "^mix-"`, "-state", "local"}, "-state local cannot keep a fleet"},
		{"state local with dry-run", []string{"-jobs", `Name matches "^mix-"`, "-state=local", "-dry-run"}, "drop -state local"},
		{"a job and -jobs", []string{"-jobs", `Name matches "^mix-"`, "mix-web"}, "-jobs and a job argument"},
		{"max-parallel-jobs 0", []string{"-jobs", `Name matches "^mix-"`, "-max-parallel-jobs", "0"}, `Invalid -max-parallel-jobs value "0"`},
		{"max-failed-jobs negative", []string{"-jobs", `Name matches "^mix-"`, "-max-failed-jobs=-1"}, `Invalid -max-failed-jobs value "-1"`},
		{"max-parallel-jobs not a number", []string{"-jobs", `Name matches "^mix-"`, "-max-parallel-jobs", "two"}, `Invalid -max-parallel-jobs value "two": give a whole number`},
		{"bad order", []string{"-jobs", `Name matches "^mix-"`, "-order", "random"}, `Invalid -order value "random"`},
		{"bad busy", []string{"-jobs", `Name matches "^mix-"`, "-busy", "queue"}, `Invalid -busy value "queue"`},
		{"fleet option without -jobs", []string{"-max-parallel-jobs", "2", "mix-web"}, "-max-parallel-jobs applies to fleet restarts only"},
		{"upstreams in a cycle", []string{"-jobs", `Name matches "^mix-"`, "-after", "mix-web: mix-batch", "-after", "mix-batch: mix-web"},
			"the jobs' upstreams form a cycle, mix-batch -> mix-web -> mix-batch"},
		{"an upstream that does not exist", []string{"-jobs", `Name matches "^mix-"`, "-after", "mix-web: db-proxy"},
			`job "mix-web" (namespace "default") restarts after "db-proxy" (namespace "default"), named by -after, but no such job exists`},
		{"-after of a job not selected", []string{"-jobs", `Name == "mix-web"`, "-after", "mix-batch: mix-web"}, `-after names job "mix-batch", which -jobs did not select`},
		{"a meta nomad-restart.after that cannot be read", []string{"-jobs", `Name == "badmeta-web"`, "-dry-run"},
			`job "badmeta-web" (namespace "default"): job meta nomad-restart.after = "mix-web mix-batch": "mix-web mix-batch" is not a job name: separate job names with commas`},
		{"-after without a colon", []string{"-jobs", `Name matches "^mix-"`, "-after", "mix-web"}, `Invalid -after value "mix-web"`},
		{"-wave-wait without a unit", []string{"-jobs", `Name matches "^mix-"`, "-wave-wait", "5"}, `Invalid -wave-wait value "5"`},
		{"scheduled fleet, a meta nomad-restart.after that cannot be read", []string{"-jobs", `Name == "badmeta-web"`, "-every", "@daily"},
			`meta nomad-restart.after = "mix-web mix-batch"`},
		{"scheduled fleet, upstreams in a cycle", []string{"-jobs", `Name matches "^mix-"`, "-after", "mix-web: mix-web", "-every", "@daily"}, "form a cycle, mix-web -> mix-web"},
		{"scheduled fleet, bad expression", []string{"-jobs", `Name ==`, "-at", future}, `Invalid -jobs expression "Name =="`},
		{"scheduled fleet, zero jobs", []string{"-jobs", `Name == "nosuch"`, "-every", "@daily"}, `selected no job in namespace "default"`},
		{"scheduled fleet, surge on a batch job", []string{"-jobs", `Name matches "^mix-"`, "-surge", "1", "-at", future}, `-surge scales service jobs only`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runRefused(t, ctx, e, c, true, tc.want, append([]string{"run", "-on-error=fail"}, tc.args...)...)
		})
	}
	vars, _, err := adminClient(t, c).Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "*"})
	if err != nil || len(vars) != 0 {
		t.Errorf("variables written by refused fleets: %d (%v)", len(vars), err)
	}
	for _, job := range []string{"mix-web", "mix-batch", "badmeta-web"} {
		assertMainRestarted(t, c, job, 0)
	}
}

// TestFleetACLSelectsOnlyListableNamespaces runs a fleet across namespaces ("*") with a
// token that may list and restart the jobs of namespace team-a only: the fleet selects
// team-a's jobs, restarts each once, and neither reads into nor writes anything in team-b.
func TestFleetACLSelectsOnlyListableNamespaces(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	admin := adminClient(t, c)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	registerFleetJobs(t, c, "team-a", "fa", 2, 2)
	registerFleetJobs(t, c, "team-b", "fb", 2, 2)
	vars := `variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } }`
	e := newCLIEnvAs(t, c, "team-a-operator", `
namespace "team-a" { capabilities = ["list-jobs", "read-job", "alloc-lifecycle"] `+vars+` }
namespace "default" { `+vars+` }`)
	ctx := testCtx(t)

	f, out := runStarFleet(t, ctx, e)
	if !strings.Contains(out, "[team-a/fa-0]") {
		t.Fatalf("run -namespace '*' -jobs does not show team-a's job fa-0")
	}
	if f.Namespace != "default" || f.Selection.Namespace != "*" || f.Status != restart.StatusSucceeded {
		t.Errorf("fleet recorded in %q, selection %q, status %s", f.Namespace, f.Selection.Namespace, f.Status)
	}
	for _, j := range f.Jobs {
		if j.Namespace != "team-a" || j.Status != fleet.JobSucceeded {
			t.Errorf("job %s/%s in the fleet: %s", j.Namespace, j.JobID, j.Status)
		}
	}
	checkFleetOnce(t, ctx, c, e, f)
	for _, job := range []string{"fb-0", "fb-1"} {
		counts, err := simtest.CountRestarts(ctx, admin, "team-b", job)
		if err != nil || len(counts.InPlace) != 0 || len(counts.Replaced) != 0 {
			t.Errorf("job %s of team-b restarted: %v (%v)", job, counts, err)
		}
	}
	bVars, _, err := admin.Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "team-b"})
	if err != nil || len(bVars) != 0 {
		t.Errorf("variables written in team-b: %d (%v)", len(bVars), err)
	}
}

// TestFleetACLVariablesDenied refuses, in one line and before any record or restart, a
// fleet whose token may not keep the fleet's record (in "default" for '*') or its jobs'
// restarts (in their namespace) in Nomad Variables.
func TestFleetACLVariablesDenied(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	admin := adminClient(t, c)
	if _, err := admin.Namespaces().Register(&api.Namespace{Name: "team-a"}, nil); err != nil {
		t.Fatal(err)
	}
	registerFleetJobs(t, c, "team-a", "fa", 2, 1)
	vars := `variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } }`
	jobs := `capabilities = ["list-jobs", "read-job", "alloc-lifecycle"]`
	cases := []struct {
		name, rules, want string
	}{
		{"no variables in the fleet's home", `namespace "team-a" { ` + jobs + ` ` + vars + ` }`,
			`Nomad denied "write" on variable "nomad-restart/~fleets/`},
		{"no variables in the jobs' namespace", `namespace "team-a" { ` + jobs + ` } namespace "default" { ` + vars + ` }`,
			`cannot keep the restarts of the fleet's jobs in namespace "team-a"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLIEnvAs(t, c, fmt.Sprintf("operator-%d", i), tc.rules)
			runRefused(t, testCtx(t), e, nil, true, tc.want, "run", "-namespace", "*", "-jobs", `Name matches "^fa-"`, "-on-error=fail")
		})
	}
	all, _, err := admin.Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "*"})
	if err != nil || len(all) != 0 {
		t.Errorf("variables written by refused fleets: %d (%v)", len(all), err)
	}
	for _, job := range []string{"fa-0", "fa-1"} {
		if counts, err := simtest.CountRestarts(testCtx(t), admin, "team-a", job); err != nil || len(counts.InPlace) != 0 {
			t.Errorf("job %s restarted by a refused fleet: %v (%v)", job, counts, err)
		}
	}
}

// TestJobNotFoundNamesTheEnvironmentsNamespace: with the namespace given by NOMAD_NAMESPACE
// only, a job that is not there is said not found in that namespace, the one looked in;
// one that is there is found.
func TestJobNotFoundNamesTheEnvironmentsNamespace(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 1))
	if _, err := adminClient(t, c).Namespaces().Register(&api.Namespace{Name: "team"}, nil); err != nil {
		t.Fatal(err)
	}
	registerFleetJobs(t, c, "team", "api", 1, 1)
	e.env = map[string]string{"NOMAD_NAMESPACE": "team"}
	ctx := testCtx(t)
	runRefused(t, ctx, e, c, true, `No job(s) with prefix or ID "web" found in namespace "team"`, "run", "-dry-run", "web")
	runRefused(t, ctx, e, c, true, `No job(s) with prefix or ID "web" found in namespace "team"`, "run", "-on-error=fail", "web")
	if code, out, errOut := e.run(ctx, "run", "-dry-run", "api-0"); code != 0 {
		t.Fatalf("run -dry-run api-0 in NOMAD_NAMESPACE team: exit %d\n%s\n%s", code, out, errOut)
	}
}
