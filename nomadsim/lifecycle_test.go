package nomadsim

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

func TestCrashingTaskIsRescheduled(t *testing.T) {
	_, cl := startCluster(t, Options{TimeScale: 500})
	job := serviceJob("crash", 1)
	tg := job.TaskGroups[0]
	tg.Tasks[0].Meta = map[string]string{sim.MetaFailAfter: "1s"}
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(1), Interval: ptr(time.Hour), Delay: ptr(time.Second), Mode: ptr("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Unlimited: ptr(false), Attempts: ptr(1), Interval: ptr(time.Hour), Delay: ptr(5 * time.Second), DelayFunction: ptr("constant")}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	var first *api.AllocationListStub
	waitFor(t, "a failed allocation replaced", func() bool {
		stubs, _, _ := cl.Jobs().Allocations("crash", false, nil)
		for _, s := range stubs {
			if s.ClientStatus == "failed" && s.NextAllocation != "" {
				first = s
				return true
			}
		}
		return false
	})
	a, _, _ := cl.Allocations().Info(first.ID, nil)
	ts := a.TaskStates["main"]
	if !ts.Failed || ts.Restarts != 1 || ts.Events[len(ts.Events)-1].Type != api.TaskNotRestarting {
		t.Errorf("failed task state: failed=%v restarts=%d last=%s", ts.Failed, ts.Restarts, ts.Events[len(ts.Events)-1].Type)
	}
	if a.DesiredDescription != "alloc was rescheduled because it failed" {
		t.Errorf("desired description %q", a.DesiredDescription)
	}
	next, _, _ := cl.Allocations().Info(first.NextAllocation, nil)
	if next.PreviousAllocation != first.ID || next.RescheduleTracker == nil || len(next.RescheduleTracker.Events) != 1 {
		t.Errorf("replacement %+v", next.RescheduleTracker)
	}
	// One reschedule attempt only: the replacement fails for good.
	waitNotReplaced(t, cl, next.ID, "failed", "rescheduled beyond the policy")
}

func TestUnhealthyDeploymentFails(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 500})
	job := serviceJob("sick", 1)
	tg := job.TaskGroups[0]
	tg.Services = []*api.Service{{Name: "sick", PortLabel: "http", Provider: "nomad", Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	tg.Meta = map[string]string{"nomadsim.check.ready": "fail"}
	tg.Update.HealthyDeadline = ptr(10 * time.Second)
	registerRunning(t, c, cl, job)
	waitLatestDeployment(t, cl, "sick", "deployment failed", failedFor("Failed due to unhealthy allocations"))
	stubs, _, _ := cl.Jobs().Allocations("sick", false, nil)
	if ds := stubs[0].DeploymentStatus; ds == nil || ds.Healthy == nil || *ds.Healthy {
		t.Errorf("alloc deployment status %+v", ds)
	}
}

func TestRestartAllTasks(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("life", 1)
	pre := api.NewTask("init", "exec")
	pre.Lifecycle = &api.TaskLifecycle{Hook: "prestart"}
	job.TaskGroups[0].Tasks = append(job.TaskGroups[0].Tasks, pre)
	a := runningAlloc(t, c, cl, job)
	waitFor(t, "prestart done", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.TaskStates["init"].State == "dead"
	})
	if err := cl.Allocations().Restart(a, "init", nil); err == nil || !strings.Contains(err.Error(), "Task not running") {
		t.Errorf("restart of a dead task: %v", err)
	}
	if err := cl.Allocations().RestartAllTasks(a, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all tasks ran again", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		init, main := x.TaskStates["init"], x.TaskStates["main"]
		return init.State == "dead" && main.State == "running" && main.Restarts == 1 && len(init.Events) > 4
	})
}

func TestDeregisterPurgeAndScale(t *testing.T) {
	c, cl := startCluster(t, Options{})
	runningAlloc(t, c, cl, serviceJob("web", 2))
	if _, _, err := cl.Jobs().Scale("web", "g", ptr(3), "more", false, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitJobRunning(ctxT(t), "default", "web"); err != nil {
		t.Fatal(err)
	}
	st, _, err := cl.Jobs().ScaleStatus("web", nil)
	if err != nil || st.TaskGroups["g"].Desired != 3 || len(st.TaskGroups["g"].Events) != 1 {
		t.Fatalf("scale status %+v %v", st, err)
	}
	if _, _, err := cl.Jobs().Deregister("web", false, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "job dead", func() bool {
		j, _, _ := cl.Jobs().Info("web", nil)
		return j != nil && *j.Status == "dead" && *j.Stop
	})
	if _, _, err := cl.Jobs().Deregister("web", true, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Jobs().Info("web", nil); err == nil || !strings.Contains(err.Error(), "job not found") {
		t.Errorf("purged job: %v", err)
	}
}
