package nomadsim

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// startCluster starts a fast cluster for a test and closes it at the end.
func startCluster(t *testing.T, opts Options) (*Cluster, *api.Client) {
	t.Helper()
	if opts.TimeScale == 0 {
		opts.TimeScale = 50
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := Start(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = c.Close()
	})
	cl, err := c.APIClient(bootstrapToken(opts, c))
	if err != nil {
		t.Fatalf("APIClient: %v", err)
	}
	return c, cl
}

// bootstrapToken is the token a cluster started with opts wants: its management token
// with ACLs on, none otherwise.
func bootstrapToken(opts Options, c *Cluster) string {
	if opts.ACLs {
		return c.BootstrapToken()
	}
	return ""
}

// serviceJob builds a service job with one group of count tasks named "main".
func serviceJob(id string, count int) *api.Job {
	job := api.NewServiceJob(id, id, "global", 50)
	tg := api.NewTaskGroup("g", count)
	task := api.NewTask("main", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh", "args": []string{"-c", "sleep 100000"}}
	task.Require(&api.Resources{CPU: ptr(20), MemoryMB: ptr(32)})
	tg.AddTask(task)
	tg.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Second), HealthyDeadline: ptr(time.Minute), MaxParallel: ptr(1)}
	job.AddTaskGroup(tg)
	job.Datacenters = []string{"dc1"}
	return job
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the test's time runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: the condition decides, the deadline only ends a test that hangs (the
	// machines are shared and a loaded one stalls tests for seconds).
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// registerRunning registers the job in the default namespace and waits until its
// allocations run.
func registerRunning(t *testing.T, c *Cluster, cl *api.Client, job *api.Job) {
	t.Helper()
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register %s: %v", *job.ID, err)
	}
	if err := c.WaitJobRunning(ctxT(t), "default", *job.ID); err != nil {
		t.Fatal(err)
	}
}

// systemJob is the system job "agent": one docker task on every node.
func systemJob() *api.Job {
	job := api.NewSystemJob("agent", "agent", "global", 50)
	tg := api.NewTaskGroup("a", 1)
	tg.AddTask(api.NewTask("t", "docker"))
	job.AddTaskGroup(tg)
	return job
}

// countAllocs lists the job's allocations and counts those match keeps, with the total.
func countAllocs(cl *api.Client, jobID string, match func(s *api.AllocationListStub) bool) (n, total int) {
	stubs, _, _ := cl.Jobs().Allocations(jobID, false, nil)
	for _, s := range stubs {
		if match(s) {
			n++
		}
	}
	return n, len(stubs)
}

// clientStatus matches the allocations whose client status is status.
func clientStatus(status string) func(s *api.AllocationListStub) bool {
	return func(s *api.AllocationListStub) bool { return s.ClientStatus == status }
}

// waitNotReplaced waits until the allocation's client status is status, then checks a
// moment later that nothing replaced it; why is the failure's text.
func waitNotReplaced(t *testing.T, cl *api.Client, allocID, status, why string) {
	t.Helper()
	waitFor(t, "allocation "+status, func() bool {
		a, _, _ := cl.Allocations().Info(allocID, nil)
		return a.ClientStatus == status
	})
	time.Sleep(50 * time.Millisecond)
	if a, _, _ := cl.Allocations().Info(allocID, nil); a.NextAllocation != "" {
		t.Fatal(why)
	}
}

// waitLatestDeployment waits until the job has a latest deployment and cond holds for it,
// and returns it.
func waitLatestDeployment(t *testing.T, cl *api.Client, jobID, what string, cond func(d *api.Deployment) bool) *api.Deployment {
	t.Helper()
	var d *api.Deployment
	waitFor(t, what, func() bool {
		var err error
		d, _, err = cl.Jobs().LatestDeployment(jobID, nil)
		return err == nil && d != nil && cond(d)
	})
	return d
}

// deploymentIs holds for a deployment of that status.
func deploymentIs(status string) func(d *api.Deployment) bool {
	return func(d *api.Deployment) bool { return d.Status == status }
}

// failedFor holds for a failed deployment with that description.
func failedFor(description string) func(d *api.Deployment) bool {
	return func(d *api.Deployment) bool { return d.Status == "failed" && d.StatusDescription == description }
}

// evalWith returns the first evaluation with the status, or nil.
func evalWith(evals []*api.Evaluation, status string) *api.Evaluation {
	for _, ev := range evals {
		if ev.Status == status {
			return ev
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
