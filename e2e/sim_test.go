package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// driverScale is the time scale of the tests that kill, fault or check a driver running in
// a child process: slower than simtest.TimeScale, because the driver runs on real time and
// a restart must last long enough for a kill, a fault or a check to land while it is
// mid-way.
const driverScale = 10

// apiClient is an official Nomad client on the cluster.
func apiClient(t testing.TB, c *nomadsim.Cluster) *api.Client {
	t.Helper()
	return simtest.ClientAs(t, c, c.BootstrapToken())
}

// newJob is a job with one group of count allocations of one task, main, that runs until
// restarted or stopped (batch tasks too). Service groups get no deployment on register, so
// that a restart may begin at once.
func newJob(id, typ string, count int) *api.Job {
	return simtest.Job(id, typ, count, "1000h")
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
