package conformance

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestStopFollowsReplacementChain(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("stop")
		stub := tg.runSleepJob(t, id, 2)[0]
		alloc, _, err := tg.api.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatalf("read allocation: %v", err)
		}
		resp, err := tg.api.Allocations().Stop(alloc, nil)
		if err != nil {
			t.Fatalf("stop allocation %s: %v", alloc.ID, err)
		}
		if resp.EvalID == "" || resp.LastIndex == 0 {
			t.Errorf("stop response %+v: want the evaluation's ID and index", resp)
		}

		old := tg.waitAlloc(t, alloc.ID, "stopped allocation complete and replaced", func(a *api.Allocation) bool {
			return a.DesiredStatus == "stop" && a.ClientStatus == "complete" && a.NextAllocation != ""
		})
		if old.DesiredTransition.Migrate == nil || !*old.DesiredTransition.Migrate {
			t.Errorf("stopped allocation: DesiredTransition.Migrate %v, want true (Nomad's stop marks the allocation for migration)", old.DesiredTransition.Migrate)
		}
		next := tg.waitAlloc(t, old.NextAllocation, "replacement running", func(a *api.Allocation) bool {
			return a.ClientStatus == "running"
		})
		if next.ID == old.ID || next.Name != old.Name || next.PreviousAllocation != old.ID || next.JobID != id {
			t.Errorf("replacement %s: Name %q PreviousAllocation %q JobID %q; old %s Name %q", next.ID, next.Name, next.PreviousAllocation, next.JobID, old.ID, old.Name)
		}
		if next.DesiredStatus != "run" {
			t.Errorf("replacement DesiredStatus %q, want run", next.DesiredStatus)
		}
		if ts := old.TaskStates["main"]; ts == nil || ts.State != "dead" || ts.FinishedAt.IsZero() {
			t.Errorf("stopped allocation's task: %+v, want dead with FinishedAt", ts)
		}
		evals, _, err := tg.api.Jobs().Evaluations(id, nil)
		if err != nil {
			t.Fatalf("job evaluations: %v", err)
		}
		found := false
		for _, e := range evals {
			if e.ID == resp.EvalID {
				found = true
				if e.TriggeredBy != "alloc-stop" {
					t.Errorf("stop evaluation TriggeredBy %q, want alloc-stop", e.TriggeredBy)
				}
			}
		}
		if !found {
			t.Errorf("stop evaluation %s not among the job's evaluations", resp.EvalID)
		}
		// The job still has two allocations that should run.
		tg.waitRunning(t, id, 2)
	})
}

func TestAllocationErrors(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("alloc-errors")
		stub := tg.runSleepJob(t, id, 1)[0]
		if _, err := tg.api.Allocations().Stop(&api.Allocation{ID: stub.ID}, nil); err != nil {
			t.Fatalf("stop allocation: %v", err)
		}
		// Once the client has learned of the stop, it refuses restarts. (Right after the stop
		// call a real agent's client may not know yet and still restart: not checked.)
		tg.waitAlloc(t, stub.ID, "stopped allocation complete", func(a *api.Allocation) bool { return a.ClientStatus == "complete" })
		r := tg.do(t, "PUT", "/v1/client/allocation/"+stub.ID+"/restart", tg.token, strings.NewReader(`{"TaskName":""}`))
		if r.status != 500 || string(r.body) != "restart of an alloc that should not run" {
			t.Errorf("restart of a stopped, complete allocation: %d %q, want 500 %q", r.status, r.body, "restart of an alloc that should not run")
		}

		const unknown = "00000000-0000-0000-0000-000000000000"
		cases := []struct{ method, path, body, text string }{
			{"PUT", "/v1/client/allocation/" + unknown + "/restart", `{"TaskName":""}`, `Unknown allocation "` + unknown + `"`},
			{"GET", "/v1/client/allocation/" + unknown + "/checks", "", `Unknown allocation "` + unknown + `"`},
			{"PUT", "/v1/allocation/" + unknown + "/stop", "", "allocation not found"},
		}
		for _, c := range cases {
			r := tg.do(t, c.method, c.path, tg.token, strings.NewReader(c.body))
			if r.status != 404 || string(r.body) != c.text {
				t.Errorf("%s %s: %d %q, want 404 %q", c.method, c.path, r.status, r.body, c.text)
			}
		}
	})
}
