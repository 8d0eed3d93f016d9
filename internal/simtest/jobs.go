package simtest

import (
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"
)

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
