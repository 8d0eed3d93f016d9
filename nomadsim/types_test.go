package nomadsim

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

func batchJob(id string, count int, runFor string) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	tg := api.NewTaskGroup("b", count)
	task := api.NewTask("work", "exec")
	task.Meta = map[string]string{sim.MetaRunFor: runFor}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	return job
}

func TestBatchCompletes(t *testing.T) {
	_, cl := startCluster(t, Options{})
	if _, _, err := cl.Jobs().Register(batchJob("once", 2, "2s"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "batch complete", func() bool {
		done, total := countAllocs(cl, "once", clientStatus("complete"))
		return total == 2 && done == 2
	})
	job, _, _ := cl.Jobs().Info("once", nil)
	if *job.Status != "dead" {
		t.Errorf("batch job status %s, want dead", *job.Status)
	}
	stubs, _, _ := cl.Jobs().Allocations("once", false, nil)
	ts := stubs[0].TaskStates["work"]
	if ts.State != "dead" || ts.Failed || ts.FinishedAt.IsZero() {
		t.Errorf("task state %+v", ts)
	}
}

func TestSystemJobs(t *testing.T) {
	c, cl := startCluster(t, Options{})
	registerRunning(t, c, cl, systemJob())
	stubs, _, _ := cl.Jobs().Allocations("agent", false, nil)
	if len(stubs) != len(c.Nodes()) {
		t.Fatalf("system job has %d allocs on %d nodes", len(stubs), len(c.Nodes()))
	}
	// A stopped system allocation is replaced only by a forced evaluation.
	a, _, _ := cl.Allocations().Info(stubs[0].ID, nil)
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	waitNotReplaced(t, cl, a.ID, "complete", "system alloc replaced without a forced evaluation")
	if _, _, err := cl.Jobs().EvaluateWithOpts("agent", api.EvalOptions{ForceReschedule: true}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replaced", func() bool {
		running, _ := countAllocs(cl, "agent", clientStatus("running"))
		return running == len(c.Nodes())
	})
}

func TestSysbatch(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := api.NewSysbatchJob("sweep", "sweep", "global", 50)
	tg := api.NewTaskGroup("s", 1)
	tg.AddTask(api.NewTask("t", "exec"))
	job.AddTaskGroup(tg)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sysbatch complete everywhere", func() bool {
		done, total := countAllocs(cl, "sweep", clientStatus("complete"))
		return done == len(c.Nodes()) && total == done
	})
}

func TestLifecycleTasks(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("life", 1)
	tg := job.TaskGroups[0]
	pre := api.NewTask("init", "exec")
	pre.Lifecycle = &api.TaskLifecycle{Hook: "prestart"}
	side := api.NewTask("proxy", "exec")
	side.Lifecycle = &api.TaskLifecycle{Hook: "prestart", Sidecar: true}
	post := api.NewTask("announce", "exec")
	post.Lifecycle = &api.TaskLifecycle{Hook: "poststart"}
	stop := api.NewTask("cleanup", "exec")
	stop.Lifecycle = &api.TaskLifecycle{Hook: "poststop"}
	tg.Tasks = append(tg.Tasks, pre, side, post, stop)
	a := runningAlloc(t, c, cl, job)
	waitFor(t, "poststart done", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.TaskStates["announce"].State == "dead" && x.ClientStatus == "running"
	})
	x, _, _ := cl.Allocations().Info(a.ID, nil)
	if x.TaskStates["init"].State != "dead" || x.TaskStates["proxy"].State != "running" || x.TaskStates["cleanup"].State != "pending" {
		t.Errorf("states init=%s proxy=%s cleanup=%s", x.TaskStates["init"].State, x.TaskStates["proxy"].State, x.TaskStates["cleanup"].State)
	}
	if !x.TaskStates["init"].FinishedAt.Before(x.TaskStates["main"].StartedAt) {
		t.Errorf("main started before prestart finished")
	}
	if _, err := cl.Allocations().Stop(x, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "poststop ran", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.ClientStatus == "complete" && !x.TaskStates["cleanup"].StartedAt.IsZero()
	})
}

func TestFailTaskStartsAndRestartPolicy(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 200})
	job := serviceJob("flaky", 1)
	job.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Attempts: ptr(3), Interval: ptr(time.Hour), Delay: ptr(time.Second), Mode: ptr("fail")}
	a := runningAlloc(t, c, cl, job)
	c.FailTaskStarts("default", "flaky", "main", 1)
	if err := cl.Allocations().Restart(a, "main", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "running after a driver failure", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		ts := x.TaskStates["main"]
		if ts.State != "running" || ts.Restarts != 2 {
			return false
		}
		for _, e := range ts.Events {
			if e.Type == api.TaskDriverFailure {
				return true
			}
		}
		return false
	})
}
