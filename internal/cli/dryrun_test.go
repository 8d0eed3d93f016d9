package cli

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestDryRun prints the plan with progressive batches (1, then 50% of 5 rounded up, then
// the rest) and what gates each, and changes nothing: no mutating request reaches Nomad
// and no restart is recorded.
func TestDryRun(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{},
		testJob("web", api.JobTypeService), checkedJob("checked", 2, "pass", 3*time.Second, 2*time.Minute))
	e.consul = c.ConsulAddr()
	ctx := testCtx(t)
	before := c.Stats().Mutations

	code, out, errOut := e.run(ctx, "run", "-dry-run", "-on-error=fail", "-state=local", "-batch-size=1,50%", "web")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Dry run", "would restart 5 allocations in 3 batches", "1st batch, 1 allocation;", "2nd batch, 3 allocations;",
		"3rd batch, 1 allocation;", "batch-size=1,50%", "group single_task", "web.single_task[", "done when its tasks run again (deadline 5m0s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, a := range allocsOf(t, c, "web") {
		if !strings.Contains(out, a.ID[:8]) || !strings.Contains(out, a.NodeID[:8]) {
			t.Errorf("allocation %s or its node %s missing from the plan:\n%s", a.ID[:8], a.NodeID[:8], out)
		}
	}

	code, out, errOut = e.run(ctx, "run", "-dry-run", "-on-error=fail", "-state=local", "-json", "checked")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rec restart.Record
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
		t.Fatalf("-json plan: %v\n%s", err, out)
	}
	if rec.Spec.Health != restart.HealthChecks || rec.Spec.GroupHealth["web"].MinHealthyTime != 3*time.Second || len(rec.Allocs) != 2 {
		t.Fatalf("plan %+v", rec.Spec)
	}

	assertNoMutationsSince(t, c, before)
	if recs := e.localRecords(t, ctx, ""); len(recs) != 0 {
		t.Fatalf("recorded %d restarts", len(recs))
	}
}

// TestDryRunSurge shows the surge step of a -surge restart and changes nothing.
func TestDryRunSurge(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("one", api.JobTypeService, 1))
	ctx := testCtx(t)
	before := c.Stats().Mutations
	code, out, errOut := e.run(ctx, "run", "-dry-run", "-on-error=fail", "-state=local", "-surge=1", "one")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"surge=1", "Surge: before the 1st batch, scale each targeted group up by 1", "scale each group back"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	assertNoMutationsSince(t, c, before)
	if st, _, err := simtest.Client(t, c).Jobs().ScaleStatus("one", nil); err != nil || st.TaskGroups["web"].Desired != 1 || len(st.TaskGroups["web"].Events) != 0 {
		t.Fatalf("scale status after a dry run: %+v %v", st, err)
	}
}

// TestTargeting plans (-dry-run -json) with -filter, -node and -datacenter and checks the
// allocations kept against Nomad's own view; a bad filter is one line naming -filter.
func TestTargeting(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, testJob("web", api.JobTypeService))
	ctx := testCtx(t)
	all := allocsOf(t, c, "web")
	dcOf := map[string]string{}
	nodes, _, err := adminClient(t, c).Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		dcOf[n.ID] = n.Datacenter
	}
	want := func(keep func(a *api.Allocation) bool) []string {
		var out []string
		for _, a := range all {
			if keep(a) {
				out = append(out, a.ID)
			}
		}
		sort.Strings(out)
		return out
	}
	plan := func(args ...string) []string {
		t.Helper()
		code, out, errOut := e.run(ctx, append(append([]string{"run", "-dry-run", "-json", "-on-error=fail", "-batch-size=100%"}, args...), "web")...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		var rec restart.Record
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var ids []string
		for _, a := range rec.Allocs {
			ids = append(ids, a.ID)
		}
		sort.Strings(ids)
		return ids
	}
	node := all[0].NodeID
	for _, tc := range []struct {
		name string
		args []string
		keep func(a *api.Allocation) bool
	}{
		{"filter on the group", []string{`-filter=TaskGroup == "single_task"`}, func(a *api.Allocation) bool { return a.TaskGroup == "single_task" }},
		{"node prefix", []string{"-node=" + node[:8]}, func(a *api.Allocation) bool { return a.NodeID == node }},
		{"datacenter", []string{"-datacenter=dc2"}, func(a *api.Allocation) bool { return dcOf[a.NodeID] == "dc2" }},
		{"filter and datacenter", []string{`-filter=TaskGroup == "multiple_tasks"`, "-datacenter=dc1"}, func(a *api.Allocation) bool {
			return a.TaskGroup == "multiple_tasks" && dcOf[a.NodeID] == "dc1"
		}},
	} {
		got, exp := plan(tc.args...), want(tc.keep)
		if len(exp) == 0 || len(exp) == len(all) {
			t.Fatalf("%s: the case selects %d of %d allocations; it must narrow the plan", tc.name, len(exp), len(all))
		}
		if strings.Join(got, ",") != strings.Join(exp, ",") {
			t.Errorf("%s: planned %v, want %v", tc.name, got, exp)
		}
	}
	code, _, errOut := e.run(ctx, "run", "-dry-run", "-on-error=fail", "-filter=TaskGroup ==", "web")
	if code != 1 || !strings.Contains(errOut, "invalid -filter") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("bad filter: exit %d %q", code, errOut)
	}
}

// TestFleetDryRunWritesNothing prints a fleet's plan, human and JSON, with no request that
// changes anything.
func TestFleetDryRunWritesNothing(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "dr", 2, 2)
	own := simpleJob("dr-meta", api.JobTypeService, 2)
	own.Meta = map[string]string{"nomad-restart.batch-size": "2"}
	register(t, c, own)
	ctx := testCtx(t)
	before := c.Stats().Mutations

	code, out, errOut := e.run(ctx, "run", "-dry-run", "-jobs", `Name matches "^dr-"`, "-max-parallel-jobs", "2", "-busy", "skip")
	t.Logf("dry run:\n%s", out)
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Dry run: a fleet of 3 jobs", "would restart 6 allocations", "max-parallel-jobs=2", "busy=skip", "on-error=fail", "Note: -on-error fail: there is no terminal", "dr-0", "dr-1", "service", "batch-size=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = e.run(ctx, "run", "-dry-run", "-json", "-jobs", `Name matches "^dr-"`, "-order", "listed")
	var plan fleetPlanOutput
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
		t.Fatalf("dry run -json: exit %d\n%s\n%s", code, out, errOut)
	}
	if !plan.DryRun || len(plan.Jobs) != 3 || plan.Options.Order != fleet.OrderListed {
		t.Fatalf("dry run -json: %+v", plan)
	}
	for _, j := range plan.Jobs {
		// The job's own meta overrides the fleet's batch size for it alone.
		wantBatches := 2
		if j.JobID == "dr-meta" {
			wantBatches = 1
		}
		if j.Allocs != 2 || j.Batches != wantBatches || j.Problem != "" {
			t.Errorf("dry run -json, job %s: %d allocations in %d batches (want 2 in %d), problem %q", j.JobID, j.Allocs, j.Batches, wantBatches, j.Problem)
		}
	}
	assertNoMutationsSince(t, c, before)
}

// TestPlanWarnsWhereRequestsWillBeLost: a task's Consul service has no delay between
// leaving the catalog and the restart; by default (-drain auto, the gate reading Consul)
// the plan drains it and says so; with -drain 0 the plan warns, and says how to avoid it,
// in the dry run, in run's output and in the record's events; a group service with a
// shutdown_delay gets neither.
func TestPlanWarnsWhereRequestsWillBeLost(t *testing.T) {
	delayed := checkedJob("delayed", 2, "pass", 0, time.Minute)
	tg := delayed.TaskGroups[0]
	tg.Services, tg.Tasks[0].Services = tg.Tasks[0].Services, nil
	tg.ShutdownDelay = new(2 * time.Second)
	c, e := startSimEnv(t, nomadsim.Options{}, checkedJob("bare", 2, "pass", 0, time.Minute), delayed)
	ctx := testCtx(t)
	e.consul = c.ConsulAddr()
	const want = `Warning: group web: service "bare-http" stopped with no delay after leaving the catalog`
	code, out, errOut := e.run(ctx, "run", "-dry-run", "bare")
	if code != 0 || strings.Contains(out, "Warning:") || !strings.Contains(out, "drain=2s") || !strings.Contains(out, "Drain: before each allocation's request") {
		t.Fatalf("dry run, -drain auto: exit %d, want a 2s drain and no warning\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(ctx, "run", "-dry-run", "-drain=0", "bare")
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "move the service to the group") || !strings.Contains(out, "or use -drain 2s") {
		t.Fatalf("dry run: exit %d, want the warning %q\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
	}
	code, out, errOut = e.run(ctx, "run", "-yes", "-state=local", "-drain=0", "bare")
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("run: exit %d, want the warning\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	recs := e.localRecords(t, ctx, "bare")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	if !slices.ContainsFunc(recs[0].Events, func(ev restart.Event) bool {
		return ev.Type == restart.EventWarning && strings.Contains(ev.Message, "Warning: group web")
	}) {
		t.Errorf("the record's events lack the warning: %+v", recs[0].Events)
	}
	code, out, errOut = e.run(ctx, "run", "-dry-run", "delayed")
	if code != 0 || strings.Contains(out, "Warning:") || strings.Contains(out, "Drain:") {
		t.Fatalf("a group service with shutdown_delay: exit %d, want no warning\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestDrainRecordsItsStepsAndLeavesNoCheck: a run with the default drain (-drain auto: the
// gate reads Consul, the task's service stops with no delay) records one alloc-drain event
// per allocation, each before that allocation's restart, and leaves no drain check in
// Consul once it ended; the allocations restart once each.
func TestDrainRecordsItsStepsAndLeavesNoCheck(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, checkedJob("bare", 2, "pass", 0, time.Minute))
	ctx := testCtx(t)
	e.consul = c.ConsulAddr()
	code, out, errOut := e.run(ctx, "run", "-yes", "-state=local", "bare")
	if code != 0 || strings.Contains(out, "Warning:") {
		t.Fatalf("run: exit %d, want success and no warning\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	recs := e.localRecords(t, ctx, "bare")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	rec := recs[0]
	if rec.Spec.Drain != restart.DefaultDrain {
		t.Errorf("the record's drain %s, want %s", rec.Spec.Drain, restart.DefaultDrain)
	}
	drained := map[string]int{} // allocation -> position of its drain event
	for i, ev := range rec.Events {
		switch ev.Type {
		case restart.EventAllocDrain:
			drained[ev.AllocID] = i
		case restart.EventAllocWaiting:
			if at, ok := drained[ev.AllocID]; !ok || at > i {
				t.Errorf("allocation %s waited to run again without a drain before: %+v", ev.AllocID, rec.Events)
			}
		}
	}
	if len(drained) != 2 {
		t.Errorf("drained %d allocations, want 2: %+v", len(drained), rec.Events)
	}
	simtest.CheckOnce(t, simtest.Client(t, c), "default", "bare", recordAllocIDs(rec), false, 10*time.Second)
	consul, err := consulapi.NewClient(&consulapi.Config{Address: c.ConsulAddr()})
	if err != nil {
		t.Fatal(err)
	}
	checks, _, err := consul.Health().State("any", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range checks {
		if strings.HasPrefix(ch.CheckID, health.DrainCheckPrefix) {
			t.Errorf("drain check %q left in Consul after the restart", ch.CheckID)
		}
	}
}

// TestDrainDeniedGoesOnUndrainedAndSaysSoOnce: Consul refuses the drain's catalog write
// (a token without service:write: 403, as Consul answers it); the restart goes on as under
// -drain 0, restarting every allocation once, and says so in one warning event, not one per
// allocation.
func TestDrainDeniedGoesOnUndrainedAndSaysSoOnce(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, checkedJob("bare", 3, "pass", 0, time.Minute))
	ctx := testCtx(t)
	target, err := url.Parse(c.ConsulAddr())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // blocking queries canceled at the end
	var denied atomic.Int32
	readOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/catalog/") {
			denied.Add(1)
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `Permission denied: token with AccessorID 'ro' lacks permission 'service:write' on "bare-http"`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer readOnly.Close()
	e.consul = readOnly.URL
	code, out, errOut := e.run(ctx, "run", "-yes", "-state=local", "-batch-size=1", "bare")
	if code != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	recs := e.localRecords(t, ctx, "bare")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	rec := recs[0]
	var warnings []string
	for _, ev := range rec.Events {
		if ev.Type == restart.EventAllocDrain {
			t.Errorf("an allocation was drained although Consul refused: %s", ev.Message)
		}
		if ev.Type == restart.EventWarning && strings.Contains(ev.Message, "stopped without a drain") {
			warnings = append(warnings, ev.Message)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "service:write") || !strings.Contains(warnings[0], "-drain 0") {
		t.Errorf("warnings %q, want one naming service:write and -drain 0", warnings)
	}
	if n := denied.Load(); n != 1 {
		t.Errorf("%d catalog writes tried, want 1: the first denial turns the drain off", n)
	}
	if rec.Status != restart.StatusSucceeded {
		t.Errorf("status %s, want succeeded", rec.Status)
	}
	simtest.CheckOnce(t, simtest.Client(t, c), "default", "bare", recordAllocIDs(rec), false, 10*time.Second)
}

// recordAllocIDs are the IDs of a record's planned allocations.
func recordAllocIDs(rec *restart.Record) []string {
	ids := make([]string, 0, len(rec.Allocs))
	for _, p := range rec.Allocs {
		ids = append(ids, p.ID)
	}
	return ids
}

// TestTargetingNamesWhatDoesNotExist refuses, in one line naming it and before anything is
// written, a -node, -datacenter or -filter field that does not exist, where Nomad's command
// would say "No allocations to restart" and exit 0; a name that exists but runs none of the
// job's allocations keeps Nomad's answer.
func TestTargetingNamesWhatDoesNotExist(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{Datacenters: []string{"dc1", "dc2", "dc3"}}, simpleJob("web", api.JobTypeService, 2))
	ctx := testCtx(t)
	busy := map[string]bool{}
	for _, a := range allocsOf(t, c, "web") {
		busy[a.NodeID] = true
	}
	nodes, _, err := adminClient(t, c).Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	idle := ""
	for _, n := range nodes {
		if !busy[n.ID] && n.Datacenter != "dc3" {
			idle = n.Name
		}
	}
	if idle == "" {
		t.Fatal("every node of dc1 and dc2 runs an allocation of web: the case needs an idle one")
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown node", []string{"-node=nosuch"}, `-node "nosuch": no node of the cluster has that ID prefix or name`},
		{"unknown node beside a known one", []string{"-node=" + idle, "-node=nosuch"}, `-node "nosuch"`},
		{"unknown datacenter", []string{"-datacenter=mars"}, `-datacenter "mars": no node of the cluster is in that datacenter (the nodes' datacenters: dc1, dc2, dc3)`},
		{"datacenter of other jobs", []string{"-datacenter=dc3"}, `-datacenter "dc3": job "web" does not run in that datacenter (its datacenters: dc1, dc2)`},
		{"unknown filter field", []string{`-filter=Nope == "x"`}, `-filter "Nope == \"x\"": an allocation has no field "Nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runRefused(t, ctx, e, c, true, tc.want, append(append([]string{"run", "-on-error=fail"}, tc.args...), "web")...)
			runRefused(t, ctx, e, c, true, tc.want, append(append([]string{"run", "-dry-run", "-on-error=fail"}, tc.args...), "web")...)
		})
	}

	// Names that exist, on which the job runs nothing: Nomad's answer, and nothing written.
	for _, args := range [][]string{{"-node=" + idle}, {`-filter=TaskGroup == "nosuch"`}} {
		before := c.Stats().Mutations
		code, out, errOut := e.run(ctx, append(append([]string{"run", "-on-error=fail"}, args...), "web")...)
		if code != 0 || strings.TrimSpace(out) != "No allocations to restart" || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and Nomad's \"No allocations to restart\"", args, code, out, errOut)
		}
		assertNoMutationsSince(t, c, before)
	}
}

// TestFleetDatacenterSkipsJobsElsewhere: a fleet's -datacenter names a datacenter that
// some of its jobs do not run in; those jobs have nothing there to restart (skipped, as
// the dry run says), where `run -datacenter` of one such job is refused.
func TestFleetDatacenterSkipsJobsElsewhere(t *testing.T) {
	elsewhere := simpleJob("dcf-0", api.JobTypeService, 2)
	there := simpleJob("dcf-1", api.JobTypeService, 1)
	there.Datacenters = []string{"dc3"}
	_, e := startSimEnv(t, nomadsim.Options{Datacenters: []string{"dc1", "dc2", "dc3"}}, elsewhere, there)
	ctx := testCtx(t)

	code, out, errOut := e.run(ctx, "run", "-dry-run", "-json", "-jobs", `Name matches "^dcf-"`, "-datacenter=dc3")
	var plan fleetPlanOutput
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || len(plan.Jobs) != 2 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, j := range plan.Jobs {
		switch j.JobID {
		case "dcf-0":
			if j.Allocs != 0 || !strings.Contains(j.Problem, `it does not run in datacenter "dc3"`) || !strings.Contains(j.Problem, "skipped") {
				t.Errorf("dry run, job dcf-0: %d allocations, problem %q; want none, skipped for its datacenters", j.Allocs, j.Problem)
			}
		case "dcf-1":
			if j.Allocs != 1 || j.Problem != "" {
				t.Errorf("dry run, job dcf-1: %d allocations, problem %q; want 1 and none", j.Allocs, j.Problem)
			}
		}
	}

	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-jobs", `Name matches "^dcf-"`, "-datacenter=dc3")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	f := fleetOf(t, ctx, e, fleetIDIn(t, out))
	for _, j := range f.Jobs {
		want := map[string]fleet.JobStatus{"dcf-0": fleet.JobSkipped, "dcf-1": fleet.JobSucceeded}[j.JobID]
		if j.Status != want {
			t.Errorf("job %s: %s (%s), want %s", j.JobID, j.Status, j.Reason, want)
		}
	}
}

// TestDryRunBatchWaitBetweenBatchesOnly: the plan says the batch wait (or the question)
// between batches only; after the last batch the restart ends, as Nomad's command does.
func TestDryRunBatchWaitBetweenBatchesOnly(t *testing.T) {
	_, e, ctx := startWebEnv(t, 3)
	for _, tc := range []struct{ wait, says string }{
		{"10s", "then waits 10s before the next batch"},
		{"ask", "then asks before the next batch"},
	} {
		// -detach: off a terminal "ask" is answered with nomad-restart answer.
		code, out, errOut := e.run(ctx, "run", "-dry-run", "-detach", "-batch-size=1", "-batch-wait="+tc.wait, "web")
		if code != 0 {
			t.Fatalf("-batch-wait %s: exit %d\n%s\n%s", tc.wait, code, out, errOut)
		}
		if !strings.Contains(out, "recorded for an agent to drive (-detach)") {
			t.Fatalf("the dry run of -detach does not say it plans a detached restart:\n%s", out)
		}
		var batches []string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, " batch, ") {
				batches = append(batches, line)
			}
		}
		if len(batches) != 3 {
			t.Fatalf("-batch-wait %s: %d batch lines, want 3:\n%s", tc.wait, len(batches), out)
		}
		for i, line := range batches {
			if last := i == len(batches)-1; strings.Contains(line, "then") != !last || (!last && !strings.HasSuffix(line, tc.says)) {
				t.Errorf("-batch-wait %s, batch %d of 3: %q; want %q between batches only", tc.wait, i+1, line, tc.says)
			}
		}
	}
}

// TestFleetWavesSeen plans, records and drives a fleet of three jobs in three waves:
// the dry run shows each job's wave and what it would wait for, status of the recorded
// fleet lists its waves and what each waits for, and the driven fleet says when each wave
// starts.
func TestFleetWavesSeen(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "wv", 3, 1)
	ctx := testCtx(t)
	order := []string{"-jobs", `Name matches "^wv-"`, "-after", "wv-2: wv-1", "-after", "wv-1: wv-0", "-max-parallel-jobs", "3", "-on-error", "fail"}

	before := c.Stats().Mutations
	code, out, errOut := e.run(ctx, append([]string{"run", "-dry-run"}, order...)...)
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"In 3 waves: a job starts once each upstream's restart succeeded", "Wave  Order  Job", "Waits For",
		"waits for wv-0: its turn (wave 1)", "waits for wv-1: its turn (wave 2)", `after="wv-2: wv-1"`} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	assertNoMutationsSince(t, c, before)

	code, out, errOut = e.run(ctx, append([]string{"run", "-detach", "-json"}, order...)...)
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id := lastRecordID(t, out)
	_, out, _ = e.run(ctx, "status", id)
	for _, want := range []string{"Waves (reached 0 of 3)", "1  waiting  wv-0", "2  waiting  wv-1", "wv-1: waits for wv-0: its turn (wave 1)", "wv-2: waits for wv-1: its turn (wave 2)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status of the recorded fleet lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Wave 1 of 3 started: wv-0", "Wave 2 of 3 started: wv-1", "Wave 3 of 3 started: wv-2", `Upstream "wv-1" (namespace "default") gave its evidence`} {
		if !strings.Contains(out, want) {
			t.Errorf("the driven fleet's output lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = e.run(ctx, "status", id)
	if !strings.Contains(out, "Waves (reached 3 of 3)") || !strings.Contains(out, "3  done     wv-2") {
		t.Errorf("status of the ended fleet:\n%s", out)
	}
	if _, out, _ = e.run(ctx, "attach", id); !strings.Contains(out, "Wave 2 of 3 started: wv-1") {
		t.Errorf("attach of the ended fleet does not say when its waves started:\n%s", out)
	}
}
