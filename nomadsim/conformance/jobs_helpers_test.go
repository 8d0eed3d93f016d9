package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func ptr[T any](v T) *T { return &v }

// sleepTask is a task that runs until killed. A real agent runs it with raw_exec; `exec`
// makes the shell become sleep, so the kill signal ends it at once (a shell ignoring the
// signal would hold every restart for the whole kill_timeout).
func sleepTask(name string) *api.Task {
	task := api.NewTask(name, "raw_exec").
		SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", "exec sleep 3600"})
	task.Require(&api.Resources{CPU: ptr(20), MemoryMB: ptr(32)})
	task.KillTimeout = ptr(2 * time.Second)
	return task
}

// exitTask is a task that exits 0 at once.
func exitTask(name string) *api.Task {
	task := api.NewTask(name, "raw_exec").
		SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", "exit 0"})
	task.Require(&api.Resources{CPU: ptr(20), MemoryMB: ptr(32)})
	return task
}

// serviceJob is a service job of one group "g" with count copies of the given tasks.
func serviceJob(id string, count int, tasks ...*api.Task) *api.Job {
	job := api.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"dc1"}
	g := api.NewTaskGroup("g", count)
	for _, task := range tasks {
		g.AddTask(task)
	}
	g.Update = &api.UpdateStrategy{
		MinHealthyTime:   ptr(time.Second),
		HealthyDeadline:  ptr(time.Minute),
		ProgressDeadline: ptr(2 * time.Minute),
	}
	job.AddTaskGroup(g)
	return job
}

// sleepJob is the suite's everyday job: count allocations of one sleeping task "main".
func sleepJob(id string, count int) *api.Job { return serviceJob(id, count, sleepTask("main")) }

// register registers job and purges it when the test ends.
func (tg *target) register(t *testing.T, job *api.Job) *api.JobRegisterResponse {
	t.Helper()
	resp, _, err := tg.api.Jobs().Register(job, (&api.WriteOptions{}).WithContext(tg.ctx(t)))
	if err != nil {
		t.Fatalf("register job %s: %v", *job.ID, err)
	}
	id := *job.ID
	t.Cleanup(func() {
		// The test's context is over by now: purge with a fresh, bounded one.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, _ = tg.api.Jobs().Deregister(id, true, (&api.WriteOptions{}).WithContext(ctx))
	})
	return resp
}

// runSleepJob registers sleepJob(id, n) and waits until its n allocations run.
func (tg *target) runSleepJob(t *testing.T, id string, n int) []*api.AllocationListStub {
	t.Helper()
	tg.register(t, sleepJob(id, n))
	return tg.waitRunning(t, id, n)
}

// deploySleepJob registers sleepJob(id, n) and waits until its deployment is successful.
func (tg *target) deploySleepJob(t *testing.T, id string, n int) *api.JobRegisterResponse {
	t.Helper()
	reg := tg.register(t, sleepJob(id, n))
	tg.waitDeploymentSuccessful(t, id)
	return reg
}

// follow reads with blocking queries (read sends q, which carries the index last seen)
// until ok accepts what it read, and fails the test with gaveUp's description of the last
// value read and the last error when the target's patience runs out.
func follow[T any](t *testing.T, tg *target, read func(q *api.QueryOptions) (T, *api.QueryMeta, error), ok func(T) bool, gaveUp func(last T, err error) string) T {
	t.Helper()
	ctx := tg.ctx(t)
	var index uint64
	var last T
	for {
		v, meta, err := read((&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx))
		if err == nil {
			last = v
			if ok(v) {
				return v
			}
			index = meta.LastIndex
		}
		if ctx.Err() != nil {
			t.Fatal(gaveUp(last, err))
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond) // a failed request: retry, not spin
		}
	}
}

// waitAllocs follows the job's allocations with blocking queries until ok accepts them, and
// fails the test (showing what it saw last) when the target's patience runs out.
func (tg *target) waitAllocs(t *testing.T, jobID string, all bool, what string, ok func([]*api.AllocationListStub) bool) []*api.AllocationListStub {
	t.Helper()
	read := func(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
		return tg.api.Jobs().Allocations(jobID, all, q)
	}
	return follow(t, tg, read, ok, func(last []*api.AllocationListStub, err error) string {
		return fmt.Sprintf("%s: job %s: gave up after %v (last error %v); allocations seen last:\n%s", what, jobID, tg.patience, err, describeAllocs(last))
	})
}

// waitAlloc follows one allocation with blocking queries until ok accepts it.
func (tg *target) waitAlloc(t *testing.T, allocID, what string, ok func(*api.Allocation) bool) *api.Allocation {
	t.Helper()
	read := func(q *api.QueryOptions) (*api.Allocation, *api.QueryMeta, error) {
		return tg.api.Allocations().Info(allocID, q)
	}
	return follow(t, tg, read, ok, func(last *api.Allocation, err error) string {
		return fmt.Sprintf("%s: allocation %s: gave up after %v (last error %v); last seen:\n%s", what, allocID, tg.patience, err, describeAlloc(last))
	})
}

// waitEvals follows the job's evaluations with blocking queries until ok accepts them.
func (tg *target) waitEvals(t *testing.T, jobID, what string, ok func([]*api.Evaluation) bool) []*api.Evaluation {
	t.Helper()
	read := func(q *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error) {
		return tg.api.Jobs().Evaluations(jobID, q)
	}
	return follow(t, tg, read, ok, func(last []*api.Evaluation, err error) string {
		var b strings.Builder
		for _, e := range last {
			fmt.Fprintf(&b, "  %s status=%s triggered=%s failedTG=%d blocked=%q\n", e.ID, e.Status, e.TriggeredBy, len(e.FailedTGAllocs), e.BlockedEval)
		}
		return fmt.Sprintf("%s: job %s: gave up after %v (last error %v); evaluations seen last:\n%s", what, jobID, tg.patience, err, b.String())
	})
}

// waitRunning waits until the job has n allocations that should run and all are running.
func (tg *target) waitRunning(t *testing.T, jobID string, n int) []*api.AllocationListStub {
	t.Helper()
	return tg.waitAllocs(t, jobID, false, fmt.Sprintf("%d allocations running", n), func(allocs []*api.AllocationListStub) bool {
		return len(live(allocs)) == n && countStatus(live(allocs), api.AllocClientStatusRunning) == n
	})
}

// live keeps the allocations whose desired status is run.
func live(allocs []*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for _, a := range allocs {
		if a.DesiredStatus == api.AllocDesiredStatusRun {
			out = append(out, a)
		}
	}
	return out
}

func countStatus(allocs []*api.AllocationListStub, status string) int {
	n := 0
	for _, a := range allocs {
		if a.ClientStatus == status {
			n++
		}
	}
	return n
}

func describeAllocs(allocs []*api.AllocationListStub) string {
	var b strings.Builder
	for _, a := range allocs {
		fmt.Fprintf(&b, "  %s %s desired=%s client=%s next=%q\n", a.ID, a.Name, a.DesiredStatus, a.ClientStatus, a.NextAllocation)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

func describeAlloc(a *api.Allocation) string {
	if a == nil {
		return "  (none)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %s %s desired=%s client=%s\n", a.ID, a.Name, a.DesiredStatus, a.ClientStatus)
	for name, ts := range a.TaskStates {
		fmt.Fprintf(&b, "  task %s state=%s restarts=%d events=%s\n", name, ts.State, ts.Restarts, eventTypes(ts.Events))
	}
	return b.String()
}

func eventTypes(events []*api.TaskEvent) string {
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
	}
	return strings.Join(types, ", ")
}

// waitDeploymentSuccessful waits until the job's latest deployment is successful: from then
// on nothing changes in the job's allocations unless a case changes them.
func (tg *target) waitDeploymentSuccessful(t *testing.T, jobID string) *api.Deployment {
	t.Helper()
	return tg.waitLatestDeployment(t, jobID, "a successful latest deployment", func(d *api.Deployment) bool {
		return d.Status == "successful"
	})
}

// waitLatestDeployment follows the job's latest deployment with blocking queries until done
// accepts it, and fails the test (showing what it saw last) when the target's patience
// runs out.
func (tg *target) waitLatestDeployment(t *testing.T, jobID, what string, done func(d *api.Deployment) bool) *api.Deployment {
	t.Helper()
	read := func(q *api.QueryOptions) (*api.Deployment, *api.QueryMeta, error) {
		return tg.api.Jobs().LatestDeployment(jobID, q)
	}
	ok := func(d *api.Deployment) bool { return d != nil && done(d) }
	return follow(t, tg, read, ok, func(last *api.Deployment, err error) string {
		status := "(none)"
		if last != nil {
			status = fmt.Sprintf("version %d %s: %s", last.JobVersion, last.Status, last.StatusDescription)
		}
		return fmt.Sprintf("job %s: no %s within %v (last error %v, last seen %s)", jobID, what, tg.patience, err, status)
	})
}
