package nomadsim

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

func TestRollingUpdateHonoursMaxParallel(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := serviceJob("roll", 4)
	registerRunning(t, c, cl, job)
	waitLatestDeployment(t, cl, "roll", "first deployment successful", deploymentIs("successful"))
	job.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	maxInFlight := 0
	waitFor(t, "second deployment successful", func() bool {
		stubs, _, _ := cl.Jobs().Allocations("roll", false, nil)
		inflight := 0
		for _, s := range stubs {
			if s.JobVersion == 1 && s.DesiredStatus == "run" && (s.DeploymentStatus == nil || s.DeploymentStatus.Healthy == nil) {
				inflight++
			}
		}
		if inflight > maxInFlight {
			maxInFlight = inflight
		}
		d, _, _ := cl.Jobs().LatestDeployment("roll", nil)
		return d != nil && d.JobVersion == 1 && d.Status == "successful"
	})
	if maxInFlight > 1 {
		t.Errorf("max_parallel 1 but %d new allocations were unhealthy at once", maxInFlight)
	}
	stubs, _, _ := cl.Jobs().Allocations("roll", false, nil)
	running := 0
	for _, s := range stubs {
		if s.DesiredStatus == "run" {
			running++
			if s.JobVersion != 1 {
				t.Errorf("alloc %s still at version %d", s.Name, s.JobVersion)
			}
		}
	}
	if running != 4 {
		t.Errorf("%d allocations desired running, want 4", running)
	}
	versions, _, _, err := cl.Jobs().Versions("roll", false, nil)
	if err != nil || len(versions) != 2 || !*versions[0].Stable {
		t.Errorf("versions %d err %v", len(versions), err)
	}
}

func TestCanaryNeedsPromotion(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := serviceJob("can", 2)
	job.TaskGroups[0].Update.Canary = ptr(1)
	registerRunning(t, c, cl, job)
	waitLatestDeployment(t, cl, "can", "first deployment successful", deploymentIs("successful"))
	job.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	d := waitLatestDeployment(t, cl, "can", "healthy canary", func(d *api.Deployment) bool {
		return d.JobVersion == 1 && d.TaskGroups["g"].HealthyAllocs == 1
	})
	time.Sleep(50 * time.Millisecond)
	d, _, _ = cl.Deployments().Info(d.ID, nil)
	if d.Status != "running" || d.StatusDescription != "Deployment is running but requires manual promotion" {
		t.Fatalf("deployment %s %q", d.Status, d.StatusDescription)
	}
	if _, _, err := cl.Deployments().PromoteAll(d.ID, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "promoted deployment successful", func() bool {
		d, _, _ = cl.Deployments().Info(d.ID, nil)
		return d.Status == "successful"
	})
	live, _ := countAllocs(cl, "can", func(s *api.AllocationListStub) bool { return s.DesiredStatus == "run" })
	if live != 2 {
		t.Errorf("%d live allocations after promotion, want 2", live)
	}
}

func TestBlockedEvaluation(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("impossible", 1)
	job.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "plan9"}}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	evals, _, err := cl.Jobs().Evaluations("impossible", nil)
	if err != nil {
		t.Fatal(err)
	}
	blocked, done := evalWith(evals, "blocked"), evalWith(evals, "complete")
	if len(evals) != 2 || blocked == nil || done == nil || done.BlockedEval != blocked.ID || blocked.PreviousEval != done.ID {
		t.Fatalf("evals %+v", evals)
	}
	for i := 1; i < len(evals); i++ {
		if evals[i-1].ID > evals[i].ID {
			t.Errorf("evaluations not ordered by ID")
		}
	}
	m := blocked.FailedTGAllocs["g"]
	if m == nil || m.ConstraintFiltered["${attr.kernel.name} = plan9"] == 0 {
		t.Errorf("failed metrics %+v", m)
	}
	_ = c
}

func TestDownNodeReplacesAllocs(t *testing.T) {
	c, cl := startCluster(t, Options{})
	a := runningAlloc(t, c, cl, serviceJob("web", 1))
	c.DownNode(a.NodeID)
	var lost *api.Allocation
	waitFor(t, "lost and replaced", func() bool {
		lost, _, _ = cl.Allocations().Info(a.ID, nil)
		return lost.ClientStatus == "lost" && lost.NextAllocation != ""
	})
	waitFor(t, "replacement running", func() bool {
		n, _, _ := cl.Allocations().Info(lost.NextAllocation, nil)
		return n.ClientStatus == "running" && n.NodeID != a.NodeID
	})
}

func TestReplacementPlacedWhenCapacityReturns(t *testing.T) {
	c, cl := startCluster(t, Options{Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
	a := runningAlloc(t, c, cl, serviceJob("web", 1))
	c.SetNodeEligibility(a.NodeID, false)
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	evals, _, _ := cl.Jobs().Evaluations("web", nil)
	if evalWith(evals, "blocked") == nil {
		t.Fatalf("no blocked evaluation after a stop with no room: %+v", evals)
	}
	c.SetNodeEligibility(a.NodeID, true)
	waitFor(t, "replacement linked and running", func() bool {
		old, _, _ := cl.Allocations().Info(a.ID, nil)
		if old.NextAllocation == "" {
			return false
		}
		n, _, _ := cl.Allocations().Info(old.NextAllocation, nil)
		return n.PreviousAllocation == a.ID && n.ClientStatus == "running"
	})
}

func TestSystemJobReturnsWithNode(t *testing.T) {
	c, cl := startCluster(t, Options{})
	registerRunning(t, c, cl, systemJob())
	node := c.Nodes()[0].ID
	c.DownNode(node)
	running := func() int {
		n, _ := countAllocs(cl, "agent", func(s *api.AllocationListStub) bool {
			return s.ClientStatus == "running" && s.NodeID == node
		})
		return n
	}
	waitFor(t, "lost", func() bool { return running() == 0 })
	c.UpNode(node)
	waitFor(t, "back on the node", func() bool { return running() == 1 })
}

func TestAutoRevert(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 200})
	job := serviceJob("rev", 2)
	job.TaskGroups[0].Update.AutoRevert = ptr(true)
	job.TaskGroups[0].Update.HealthyDeadline = ptr(5 * time.Second)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	waitLatestDeployment(t, cl, "rev", "v0 stable", deploymentIs("successful"))
	// Version 1 crashes at once: its deployment fails and version 0 comes back as v2.
	job.TaskGroups[0].Tasks[0].Meta = map[string]string{sim.MetaFailAfter: "100ms"}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rolled back", func() bool {
		j, _, _ := cl.Jobs().Info("rev", nil)
		return j != nil && *j.Version == 2
	})
	j, _, _ := cl.Jobs().Info("rev", nil)
	if _, ok := j.TaskGroups[0].Tasks[0].Meta[sim.MetaFailAfter]; ok {
		t.Errorf("version 2 is not version 0's spec")
	}
	_ = c
}

func TestProgressDeadline(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 500})
	job := serviceJob("slow", 1)
	tg := job.TaskGroups[0]
	tg.Services = []*api.Service{{Name: "slow", PortLabel: "http", Provider: "nomad", Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	tg.Meta = map[string]string{"nomadsim.check.ready": "fail"}
	tg.Update.HealthyDeadline = ptr(time.Hour)
	tg.Update.ProgressDeadline = ptr(10 * time.Second)
	registerRunning(t, c, cl, job)
	waitLatestDeployment(t, cl, "slow", "deployment failed by its progress deadline", failedFor("Failed due to progress deadline"))
}
