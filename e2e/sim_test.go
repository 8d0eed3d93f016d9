package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// apiClient is an official Nomad client on the cluster.
func apiClient(t testing.TB, c *nomadsim.Cluster) *api.Client {
	t.Helper()
	client, err := c.APIClient(c.BootstrapToken())
	if err != nil {
		t.Fatalf("nomad client: %v", err)
	}
	return client
}

// newJob is a job with one group of count allocations of one task, main, that runs until
// restarted or stopped (batch tasks too). Service groups get no deployment on register, so
// that a restart may begin at once.
func newJob(id, typ string, count int) *api.Job {
	job := &api.Job{ID: &id, Name: &id, Type: &typ, Datacenters: []string{"dc1", "dc2"}}
	if typ == api.JobTypeSystem || typ == api.JobTypeSysbatch {
		count = 1
	}
	tg := api.NewTaskGroup("web", count)
	main := api.NewTask("main", "mock_driver")
	if typ == api.JobTypeBatch || typ == api.JobTypeSysbatch {
		main.Meta = map[string]string{"nomadsim.run_for": "1000h"}
	}
	tg.AddTask(main)
	if typ == api.JobTypeService {
		tg.Update = &api.UpdateStrategy{MaxParallel: new(int)}
	}
	job.AddTaskGroup(tg)
	return job
}

// register registers job and waits until all its allocations run.
func register(ctx context.Context, c *nomadsim.Cluster, job *api.Job) error {
	if _, err := c.RegisterJob(job); err != nil {
		return fmt.Errorf("registering %s: %w", *job.ID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.WaitJobRunning(wctx, "default", *job.ID); err != nil {
		return fmt.Errorf("waiting for %s to run: %w", *job.ID, err)
	}
	return nil
}
