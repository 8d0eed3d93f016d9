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
	cl, err := c.APIClient(opts.bootstrapToken(c))
	if err != nil {
		t.Fatalf("APIClient: %v", err)
	}
	return c, cl
}

func (o Options) bootstrapToken(c *Cluster) string {
	if o.ACLs {
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

// evalWith returns the first evaluation with the status, or nil.
func evalWith(evals []*api.Evaluation, status string) *api.Evaluation {
	for _, ev := range evals {
		if ev.Status == status {
			return ev
		}
	}
	return nil
}
