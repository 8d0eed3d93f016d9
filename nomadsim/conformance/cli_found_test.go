package conformance

// Cases first found by driving nomadsim with Nomad's own CLI (job run, job plan, job status).

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// The CLI's `nomad job run` and `nomad job scale` follow a deployment only when the
// evaluation names it: Nomad's scheduler sets the evaluation's DeploymentID.
func TestRegisterEvalNamesDeployment(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("eval-deployment")
		resp := tg.register(t, sleepJob(id, 1))
		evals := tg.waitEvals(t, id, "the register's evaluation complete", func(evals []*api.Evaluation) bool {
			for _, e := range evals {
				if e.ID == resp.EvalID && e.Status == "complete" {
					return true
				}
			}
			return false
		})
		deps, _, err := tg.api.Jobs().Deployments(id, false, nil)
		if err != nil || len(deps) != 1 {
			t.Fatalf("job deployments: %d (err %v), want 1", len(deps), err)
		}
		for _, e := range evals {
			if e.ID == resp.EvalID && e.DeploymentID != deps[0].ID {
				t.Errorf("register evaluation DeploymentID %q, want the deployment %s it created", e.DeploymentID, deps[0].ID)
			}
		}
	})
}

// `nomad job plan` dereferences the plan's Diff: Nomad answers one when asked (diff=true).
func TestPlanDiff(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("plan")
		job := sleepJob(id, 1)
		tg.register(t, job)
		tg.waitRunning(t, id, 1)
		changed := sleepJob(id, 1)
		changed.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "exec sleep 3601"}
		plan, _, err := tg.api.Jobs().Plan(changed, true, nil)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		if plan.Diff == nil {
			t.Fatal("plan with diff=true answered no Diff (the Nomad CLI's `job plan` crashes on it)")
		}
		if plan.Diff.Type != "Edited" || len(plan.Diff.TaskGroups) != 1 || plan.Diff.TaskGroups[0].Updates["create/destroy update"] != 1 {
			t.Errorf("plan diff Type %q, task groups %+v; want Edited with one create/destroy update", plan.Diff.Type, plan.Diff.TaskGroups)
		}
		if plan.Annotations == nil || plan.Annotations.DesiredTGUpdates["g"] == nil || plan.Annotations.DesiredTGUpdates["g"].DestructiveUpdate != 1 {
			t.Errorf("plan annotations %+v, want one destructive update in group g", plan.Annotations)
		}
	})
}

// Nomad puts a job without a node pool in the "default" pool at registration.
func TestJobNodePoolDefault(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("pool")
		tg.register(t, sleepJob(id, 1))
		job, _, err := tg.api.Jobs().Info(id, nil)
		if err != nil {
			t.Fatalf("read job: %v", err)
		}
		if pool := job.NodePool; pool == nil || *pool != "default" {
			got := "<nil>"
			if pool != nil {
				got = *pool
			}
			t.Errorf("job NodePool %q, want \"default\"", got)
		}
	})
}
