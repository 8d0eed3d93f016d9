package conformance

import (
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestRegisterRunsAllocations(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("register")
		resp := tg.register(t, sleepJob(id, 2))
		if resp.EvalID == "" || resp.JobModifyIndex == 0 || resp.EvalCreateIndex == 0 {
			t.Errorf("register response = %+v, want an EvalID, an EvalCreateIndex and a JobModifyIndex", resp)
		}
		allocs := tg.waitRunning(t, id, 2)
		var names []string
		for _, a := range allocs {
			names = append(names, a.Name)
			if a.JobID != id || a.TaskGroup != "g" || a.NodeID == "" || a.EvalID == "" {
				t.Errorf("allocation %s: JobID %q TaskGroup %q NodeID %q EvalID %q", a.ID, a.JobID, a.TaskGroup, a.NodeID, a.EvalID)
			}
			if ts := a.TaskStates["main"]; ts == nil || ts.State != "running" {
				t.Errorf("allocation %s: task main state = %+v, want running", a.ID, ts)
			}
		}
		slices.Sort(names)
		if want := []string{id + ".g[0]", id + ".g[1]"}; !slices.Equal(names, want) {
			t.Errorf("allocation names = %v, want %v", names, want)
		}

		job, _, err := tg.api.Jobs().Info(id, nil)
		if err != nil {
			t.Fatalf("read job: %v", err)
		}
		if *job.Status != "running" || *job.Version != 0 || *job.Namespace != "default" || *job.Type != "service" {
			t.Errorf("job: Status %q Version %d Namespace %q Type %q, want running 0 default service", *job.Status, *job.Version, *job.Namespace, *job.Type)
		}
		versions, _, _, err := tg.api.Jobs().Versions(id, false, nil)
		if err != nil {
			t.Fatalf("job versions: %v", err)
		}
		if len(versions) != 1 || *versions[0].Version != 0 {
			t.Errorf("job versions: got %d, want exactly version 0", len(versions))
		}
	})
}

func TestJobListPrefixAndAllNamespaces(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		a, b := tg.id("list-alpha"), tg.id("list-beta")
		tg.register(t, sleepJob(a, 1))
		tg.register(t, sleepJob(b, 1))

		got, _, err := tg.api.Jobs().PrefixList(tg.id("list-al"))
		if err != nil {
			t.Fatalf("prefix list: %v", err)
		}
		if ids := stubIDs(got); !slices.Equal(ids, []string{a}) {
			t.Errorf("jobs with prefix %q = %v, want [%s]", tg.id("list-al"), ids, a)
		}

		got, _, err = tg.api.Jobs().List(&api.QueryOptions{Namespace: "*", Prefix: tg.id("list-")})
		if err != nil {
			t.Fatalf("list namespace=*: %v", err)
		}
		if ids := stubIDs(got); !slices.Equal(ids, []string{a, b}) {
			t.Errorf("jobs in all namespaces with prefix = %v, want [%s %s]", ids, a, b)
		}
		for _, j := range got {
			if j.Namespace != "default" || j.Type != "service" || j.JobSummary == nil {
				t.Errorf("job stub %s: Namespace %q Type %q JobSummary %v", j.ID, j.Namespace, j.Type, j.JobSummary)
			}
		}

		got, _, err = tg.api.Jobs().PrefixList(tg.id("nothing-has-this-name"))
		if err != nil {
			t.Fatalf("prefix list matching nothing: %v (Nomad answers an empty list, not an error)", err)
		}
		if len(got) != 0 {
			t.Errorf("prefix matching nothing: got %v", stubIDs(got))
		}
	})
}

func stubIDs(jobs []*api.JobListStub) []string {
	return sortedIDs(jobs, func(j *api.JobListStub) string { return j.ID })
}

// sortedIDs is the IDs of the objects, sorted, to compare lists whatever their order.
func sortedIDs[T any](objects []T, id func(T) string) []string {
	ids := make([]string, 0, len(objects))
	for _, o := range objects {
		ids = append(ids, id(o))
	}
	slices.Sort(ids)
	return ids
}

func TestNotFoundTexts(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		cases := []struct{ path, text string }{
			{"/v1/job/" + tg.id("no-such-job"), "job not found"},
			{"/v1/allocation/00000000-0000-0000-0000-000000000000", "alloc not found"},
			{"/v1/var/" + tg.id("no/such/variable"), "variable not found"},
		}
		for _, c := range cases {
			r := tg.do(t, "GET", c.path, tg.token, nil)
			if r.status != 404 || string(r.body) != c.text {
				t.Errorf("GET %s = %d %q, want 404 %q", c.path, r.status, r.body, c.text)
			}
			if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("GET %s: Content-Type %q, want plain text", c.path, ct)
			}
			if r.header.Get("X-Nomad-Index") == "" {
				t.Errorf("GET %s: no X-Nomad-Index header on a 404 read", c.path)
			}
		}
	})
}

func TestBatchJobCompletes(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("batch")
		job := serviceJob(id, 2, exitTask("once"))
		job.Type = ptr("batch")
		job.TaskGroups[0].Update = nil
		tg.register(t, job)
		tg.waitAllocs(t, id, false, "2 complete allocations", func(allocs []*api.AllocationListStub) bool {
			return len(allocs) == 2 && countStatus(allocs, api.AllocClientStatusComplete) == 2
		})
		ctx := tg.ctx(t)
		var index uint64
		for {
			job, meta, err := tg.api.Jobs().Info(id, (&api.QueryOptions{WaitIndex: index}).WithContext(ctx))
			if err != nil {
				t.Fatalf("read batch job, waiting for status dead: %v", err)
			}
			if *job.Status == "dead" {
				break
			}
			index = meta.LastIndex
		}
	})
}

func TestSystemJobOneAllocPerNode(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		nodes, _, err := tg.api.Nodes().List(nil)
		if err != nil {
			t.Fatalf("list nodes: %v", err)
		}
		want := map[string]bool{}
		for _, n := range nodes {
			if n.Status == "ready" && n.SchedulingEligibility == "eligible" && n.Datacenter == "dc1" {
				want[n.ID] = true
			}
		}
		if len(want) == 0 {
			t.Fatalf("no ready, eligible node in dc1 among %d nodes", len(nodes))
		}
		id := tg.id("system")
		job := sleepJob(id, 1)
		job.Type = ptr("system")
		job.TaskGroups[0].Update = nil
		tg.register(t, job)
		allocs := tg.waitRunning(t, id, len(want))
		for _, a := range allocs {
			if !want[a.NodeID] {
				t.Errorf("system allocation %s on node %s, not one of the eligible nodes", a.ID, a.NodeID)
			}
			delete(want, a.NodeID)
		}
		if len(want) != 0 {
			t.Errorf("nodes without a system allocation: %v", want)
		}
	})
}

func TestForceRescheduleEvaluate(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("evaluate")
		before := tg.runSleepJob(t, id, 2)
		evalID, meta, err := tg.api.Jobs().EvaluateWithOpts(id, api.EvalOptions{ForceReschedule: true}, nil)
		if err != nil {
			t.Fatalf("evaluate with ForceReschedule: %v", err)
		}
		if evalID == "" || meta.LastIndex == 0 {
			t.Fatalf("evaluate: EvalID %q index %d, want both set", evalID, meta.LastIndex)
		}
		evals := tg.waitEvals(t, id, "the forced evaluation completes", func(evals []*api.Evaluation) bool {
			for _, e := range evals {
				if e.ID == evalID && e.Status == "complete" {
					return true
				}
			}
			return false
		})
		for _, e := range evals {
			if e.ID == evalID && e.TriggeredBy != "job-register" {
				t.Errorf("forced evaluation TriggeredBy %q, want job-register (as Nomad's Job.Evaluate sets it)", e.TriggeredBy)
			}
		}
		// ForceReschedule only concerns failed allocations: healthy running ones stay.
		after, _, err := tg.api.Jobs().Allocations(id, false, nil)
		if err != nil {
			t.Fatalf("allocations after evaluate: %v", err)
		}
		if got, want := allocIDs(live(after)), allocIDs(before); !slices.Equal(got, want) {
			t.Errorf("live allocations after a forced evaluation = %v, want unchanged %v", got, want)
		}
	})
}

func allocIDs(allocs []*api.AllocationListStub) []string {
	return sortedIDs(allocs, func(a *api.AllocationListStub) string { return a.ID })
}

func TestBlockedEvaluationForUnplaceableJob(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("impossible")
		job := sleepJob(id, 1)
		job.Constrain(api.NewConstraint("${attr.kernel.name}", "=", "plan9"))
		resp := tg.register(t, job)
		// The blocked evaluation is created before the register's evaluation is marked
		// complete (and linked to it): wait for both.
		evals := tg.waitEvals(t, id, "a blocked evaluation and the register's complete", func(evals []*api.Evaluation) bool {
			blocked, done := false, false
			for _, e := range evals {
				blocked = blocked || e.Status == "blocked"
				done = done || e.ID == resp.EvalID && e.Status == "complete"
			}
			return blocked && done
		})
		var first, blocked *api.Evaluation
		for _, e := range evals {
			switch {
			case e.ID == resp.EvalID:
				first = e
			case e.Status == "blocked":
				blocked = e
			}
		}
		if first == nil || blocked == nil {
			t.Fatalf("want the register's evaluation %s and a blocked one; got %d evaluations", resp.EvalID, len(evals))
		}
		if first.BlockedEval != blocked.ID || blocked.PreviousEval != first.ID {
			t.Errorf("register eval BlockedEval %q, blocked eval PreviousEval %q: want them linked (%s, %s)", first.BlockedEval, blocked.PreviousEval, blocked.ID, first.ID)
		}
		if blocked.TriggeredBy != "queued-allocs" || blocked.StatusDescription != "created to place remaining allocations" {
			t.Errorf("blocked eval TriggeredBy %q StatusDescription %q", blocked.TriggeredBy, blocked.StatusDescription)
		}
		for _, e := range []*api.Evaluation{first, blocked} {
			m := e.FailedTGAllocs["g"]
			if m == nil {
				t.Errorf("evaluation %s (%s): no FailedTGAllocs for group g: %v", e.ID, e.Status, e.FailedTGAllocs)
				continue
			}
			if m.NodesEvaluated == 0 || m.ConstraintFiltered["${attr.kernel.name} = plan9"] == 0 {
				t.Errorf("evaluation %s: FailedTGAllocs[g] NodesEvaluated %d ConstraintFiltered %v, want the constraint to have filtered the nodes", e.ID, m.NodesEvaluated, m.ConstraintFiltered)
			}
		}
		if first.Status != "complete" || first.QueuedAllocations["g"] != 1 {
			t.Errorf("register eval Status %q QueuedAllocations %v, want complete with 1 queued", first.Status, first.QueuedAllocations)
		}
		allocs, _, err := tg.api.Jobs().Allocations(id, true, nil)
		if err != nil || len(allocs) != 0 {
			t.Errorf("an unplaceable job has allocations %v (err %v)", describeAllocs(allocs), err)
		}
	})
}

func TestDeploymentsList(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("deploy")
		tg.runSleepJob(t, id, 2)
		deps, _, err := tg.api.Jobs().Deployments(id, false, nil)
		if err != nil {
			t.Fatalf("job deployments: %v", err)
		}
		if len(deps) != 1 {
			t.Fatalf("job deployments: got %d, want 1 for the first version of a service job", len(deps))
		}
		d := deps[0]
		st := d.TaskGroups["g"]
		if d.JobID != id || d.JobVersion != 0 || d.Namespace != "default" || st == nil || st.DesiredTotal != 2 {
			t.Errorf("deployment %s: JobID %q JobVersion %d Namespace %q group state %+v", d.ID, d.JobID, d.JobVersion, d.Namespace, st)
		}
		all, _, err := tg.api.Deployments().List(&api.QueryOptions{Prefix: d.ID[:8]})
		if err != nil {
			t.Fatalf("deployments list by prefix: %v", err)
		}
		if len(all) != 1 || all[0].ID != d.ID {
			t.Errorf("deployments with prefix %s = %d entries, want just %s", d.ID[:8], len(all), d.ID)
		}
		latest, _, err := tg.api.Jobs().LatestDeployment(id, nil)
		if err != nil || latest == nil || latest.ID != d.ID {
			t.Errorf("latest deployment = %v (err %v), want %s", latest, err, d.ID)
		}
		// The deployment succeeds once every allocation stayed healthy for min_healthy_time.
		d = tg.waitDeploymentSuccessful(t, id)
		if st := d.TaskGroups["g"]; st.HealthyAllocs != 2 || st.PlacedAllocs != 2 || d.StatusDescription != "Deployment completed successfully" {
			t.Errorf("successful deployment: HealthyAllocs %d PlacedAllocs %d StatusDescription %q", st.HealthyAllocs, st.PlacedAllocs, d.StatusDescription)
		}
	})
}
