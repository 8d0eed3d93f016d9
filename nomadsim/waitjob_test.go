package nomadsim

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestWaitJobRunningWaitsForDeployment: WaitJobRunning returns only once the job's
// deployment is over, since restarting during a deployment is refused.
func TestWaitJobRunningWaitsForDeployment(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 20})
	job := serviceJob("web", 2)
	job.TaskGroups[0].Update.MinHealthyTime = ptr(5 * time.Second)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitJobRunning(ctxT(t), "", "web"); err != nil {
		t.Fatal(err)
	}
	d, _, err := cl.Jobs().LatestDeployment("web", nil)
	if err != nil || d == nil {
		t.Fatalf("latest deployment: %v, %v", d, err)
	}
	if d.Status != api.DeploymentStatusSuccessful {
		t.Errorf("deployment %s after WaitJobRunning, want successful", d.Status)
	}
	if err := c.WaitDeploymentDone(ctxT(t), "", "web"); err != nil {
		t.Error(err)
	}
	if err := c.WaitDeploymentDone(ctxT(t), "", "nope"); err == nil {
		t.Error("WaitDeploymentDone of an unknown job succeeded")
	}
}

// TestDeploymentCompletionEval: as Nomad's deployment watcher does, the health update
// that completes a deployment yields an evaluation triggered by deployment-watcher.
func TestDeploymentCompletionEval(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 50})
	runningAlloc(t, c, cl, serviceJob("one", 1))
	d, _, err := cl.Jobs().LatestDeployment("one", nil)
	if err != nil || d == nil || d.Status != api.DeploymentStatusSuccessful {
		t.Fatalf("latest deployment %+v, %v", d, err)
	}
	evals, _, err := cl.Jobs().Evaluations("one", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evals {
		if ev.TriggeredBy == "deployment-watcher" && ev.DeploymentID == d.ID {
			return
		}
	}
	t.Errorf("no deployment-watcher evaluation for deployment %s among %d evaluations", d.ID, len(evals))
}

// TestWaitAllocsRunningIgnoresDeployment: WaitAllocsRunning returns while the deployment
// still runs; WaitJobRunning does not.
func TestWaitAllocsRunningIgnoresDeployment(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 50})
	job := serviceJob("slowdep", 1)
	job.TaskGroups[0].Update.MinHealthyTime = ptr(time.Hour)
	job.TaskGroups[0].Update.HealthyDeadline = ptr(2 * time.Hour)
	job.TaskGroups[0].Update.ProgressDeadline = ptr(3 * time.Hour)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitAllocsRunning(ctxT(t), "", "slowdep"); err != nil {
		t.Fatal(err)
	}
	d, _, err := cl.Jobs().LatestDeployment("slowdep", nil)
	if err != nil || d == nil || d.Status != api.DeploymentStatusRunning {
		t.Fatalf("deployment after WaitAllocsRunning: %+v, %v; want running", d, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.WaitJobRunning(ctx, "", "slowdep"); err == nil {
		t.Error("WaitJobRunning returned while the deployment runs")
	}
}
