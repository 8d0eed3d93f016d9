package simtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// registerWithin bounds RegisterRunning's wait: generous, since two noisy cores may be
// shared with other packages' tests.
const registerWithin = 90 * time.Second

// RegisterRunning registers jobs on c and waits until each runs (Cluster.WaitJobRunning:
// every allocation it wants running and its deployment, if any, over). It fails the test
// when Nomad refuses a job, or when one is not running within registerWithin.
func RegisterRunning(t testing.TB, c *nomadsim.Cluster, jobs ...*api.Job) {
	t.Helper()
	for _, job := range jobs {
		if _, err := c.RegisterJob(job); err != nil {
			t.Fatalf("registering job %s: %v", *job.ID, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), registerWithin)
	defer cancel()
	for _, job := range jobs {
		ns := "default"
		if job.Namespace != nil && *job.Namespace != "" {
			ns = *job.Namespace
		}
		if err := c.WaitJobRunning(ctx, ns, *job.ID); err != nil {
			t.Fatalf("waiting for job %s to run: %v", *job.ID, err)
		}
	}
}

// Job is a job of one group, web, of count allocations (one for a system or sysbatch job)
// of one mock_driver task, main. A batch task runs for batchRunFor (nomadsim ends an
// unscripted batch task at once) so that it runs until restarted. A service group gets no
// deployment on register, so that a restart may begin at once.
func Job(id, typ string, count int, batchRunFor string) *api.Job {
	job := &api.Job{ID: &id, Name: &id, Type: &typ, Datacenters: []string{"dc1", "dc2"}}
	if typ == api.JobTypeSystem || typ == api.JobTypeSysbatch {
		count = 1
	}
	tg := api.NewTaskGroup("web", count)
	main := api.NewTask("main", "mock_driver")
	if typ == api.JobTypeBatch || typ == api.JobTypeSysbatch {
		main.Meta = map[string]string{"nomadsim.run_for": batchRunFor}
	}
	tg.AddTask(main)
	if typ == api.JobTypeService {
		tg.Update = &api.UpdateStrategy{MaxParallel: new(int)}
	}
	job.AddTaskGroup(tg)
	return job
}

// Concurrently runs f(0) .. f(n-1) at once (registering many jobs, say) and, once all
// returned, fails the test with the first error one returned.
func Concurrently(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// ServedJob is Job(id, "service", count) whose group serves port http under one group
// service named id, of provider ("consul" or "nomad"), with an HTTP check "ready" every
// second whose script passes readyAfter after the tasks start (nomadsim.check.ready =
// pass_after=readyAfter), and whose group waits shutdownDelay (0: none) before its tasks are
// killed. On a nomadsim with ServeInstances, each allocation answers on that port as its
// check says, where the catalogs say it is.
func ServedJob(id string, count int, provider string, readyAfter, shutdownDelay time.Duration) *api.Job {
	job := Job(id, api.JobTypeService, count, "")
	tg := job.TaskGroups[0]
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Services = []*api.Service{{Name: id, PortLabel: "http", Provider: provider,
		Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	tg.Meta = map[string]string{"nomadsim.check.ready": "pass_after=" + readyAfter.String()}
	if shutdownDelay > 0 {
		tg.ShutdownDelay = &shutdownDelay
	}
	return job
}
