package cli

import (
	"bufio"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
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
	c := startSim(t, nomadsim.Options{})
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
