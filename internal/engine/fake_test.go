package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// fakeCluster is an in-memory Nomad for unit tests: in-place restarts go through Nomad's task
// event sequence (Restart Signaled, Restarting with the counter up and the task pending, then
// Started a moment later), stops create replacements, and every allocation change wakes the
// watchers, as blocking queries do. It counts the requests that took effect per allocation.
type fakeCluster struct {
	mu      sync.Mutex
	job     *restart.Job
	allocs  map[string]*restart.Alloc
	index   uint64
	clock   time.Time // Nomad's clock, advanced per event
	changed chan struct{}
	// startDelay is how long a restarted task stays pending before it runs again.
	startDelay time.Duration

	restarts   map[string]int // alloc ID -> restart requests that took effect
	stops      map[string]int
	evals      int
	deployment *cluster.Deployment
	// faults: op name -> remaining count; "-lost" suffix: applied, then the answer lost.
	faults     map[string]int
	permanent  map[string]error
	placement  map[string]*cluster.PlacementFailure // group -> failure reported after a stop
	noReplace  bool                                 // stops create no replacement
	failStart  map[string]bool                      // alloc ID -> its restarted tasks fail
	crashAfter time.Duration                        // restarted tasks crash this long after starting
	calls      map[string]int
}

func newFakeCluster(jobType string, groups map[string]int, tasks ...string) *fakeCluster {
	if len(tasks) == 0 {
		tasks = []string{"main"}
	}
	f := &fakeCluster{
		allocs: map[string]*restart.Alloc{},
		// Nomad's clock starts at the local time: the engine's estimate of Nomad's clock
		// reads the local clock until it has seen a Nomad timestamp, and a fake clock months
		// away made a gate judged before that first timestamp see its deadline long passed.
		clock:      time.Now().UTC().Truncate(time.Second),
		changed:    make(chan struct{}),
		restarts:   map[string]int{},
		stops:      map[string]int{},
		faults:     map[string]int{},
		permanent:  map[string]error{},
		placement:  map[string]*cluster.PlacementFailure{},
		failStart:  map[string]bool{},
		calls:      map[string]int{},
		startDelay: time.Millisecond,
	}
	f.job = &restart.Job{ID: "web", Namespace: "default", Region: "global", Type: jobType, Version: 1}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		f.job.Groups = append(f.job.Groups, restart.Group{Name: g, Count: groups[g], Tasks: tasks})
		for k := 0; k < groups[g]; k++ {
			f.addAlloc(g, k, "")
		}
	}
	return f
}

func (f *fakeCluster) tick() time.Time {
	f.clock = f.clock.Add(time.Millisecond)
	return f.clock
}

// bumpLocked advances the index and wakes the watchers.
func (f *fakeCluster) bumpLocked(a *restart.Alloc) {
	f.index++
	if a != nil {
		a.ModifyIndex = f.index
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeCluster) addAlloc(group string, k int, prev string) *restart.Alloc {
	f.index++
	a := &restart.Alloc{
		ID: fmt.Sprintf("%08d-0000-0000-0000-%012d", f.index, f.index), Name: fmt.Sprintf("web.%s[%d]", group, k),
		Namespace: "default", JobID: "web", JobVersion: 1, Group: group, NodeID: "node-1",
		DesiredStatus: restart.DesiredRun, ClientStatus: restart.ClientRunning,
		PreviousAllocation: prev, CreateIndex: f.index, ModifyIndex: f.index, Tasks: map[string]restart.TaskState{},
	}
	for _, t := range f.job.Groups[f.groupIndex(group)].Tasks {
		started := f.tick()
		a.Tasks[t] = restart.TaskState{State: restart.TaskRunning, StartedAt: started, Events: []restart.TaskEvent{{Type: restart.TaskEventStarted, Time: started}}}
	}
	f.allocs[a.ID] = a
	return a
}

func (f *fakeCluster) groupIndex(g string) int {
	for i, x := range f.job.Groups {
		if x.Name == g {
			return i
		}
	}
	panic("no group " + g)
}

func cloneAlloc(a *restart.Alloc) *restart.Alloc {
	c := *a
	c.Tasks = map[string]restart.TaskState{}
	for k, v := range a.Tasks {
		v.Events = append([]restart.TaskEvent(nil), v.Events...)
		c.Tasks[k] = v
	}
	return &c
}

// fault consumes an injected fault for op: a transient error before (op) or after applying
// (op+"-lost").
func (f *fakeCluster) faultLocked(op string) (before, after bool) {
	f.calls[op]++
	if f.faults[op] > 0 {
		f.faults[op]--
		return true, false
	}
	if f.faults[op+"-lost"] > 0 {
		f.faults[op+"-lost"]--
		return false, true
	}
	return false, false
}

// errUnavailable is the transient answer of a cluster without a leader.
var errUnavailable = simtest.Answer{Status: 500, Text: "No cluster leader"}

// fakeReadRetry is how the fake retries its reads' transient failures inside, as
// cluster.Nomad does, so that the engine never sees them (faster, for tests).
var fakeReadRetry = cluster.RetryPolicy{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxElapsed: 10 * time.Second}

func (f *fakeCluster) ResolveJob(ctx context.Context, ns, prefix string) (*restart.Job, error) {
	if strings.HasPrefix(f.job.ID, prefix) {
		return f.job, nil
	}
	return nil, cluster.ErrJobNotFound
}

func (f *fakeCluster) JobVersions(ctx context.Context, ns, jobID string) (map[uint64]*restart.Job, error) {
	return map[uint64]*restart.Job{f.job.Version: f.job}, nil
}

func (f *fakeCluster) JobAllocations(ctx context.Context, ns, jobID string) ([]*restart.Alloc, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*restart.Alloc
	for _, a := range f.allocs {
		out = append(out, cloneAlloc(a))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out, f.index, nil
}

func (f *fakeCluster) ActiveDeployment(ctx context.Context, ns, jobID string) (*cluster.Deployment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deployment, nil
}

// Allocation reads an allocation; an injected "read" fault fails an attempt, which the fake
// retries inside as cluster.Nomad does.
func (f *fakeCluster) Allocation(ctx context.Context, id string) (*restart.Alloc, error) {
	return cluster.Retry(ctx, fakeReadRetry, nil, "reading allocation", func(context.Context) (*restart.Alloc, error) {
		return f.readAlloc(id)
	})
}

func (f *fakeCluster) readAlloc(id string) (*restart.Alloc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, _ := f.faultLocked("read"); b {
		return nil, errUnavailable
	}
	a, ok := f.allocs[id]
	if !ok {
		return nil, fmt.Errorf("reading allocation %q: %w", id, cluster.ErrAllocNotFound)
	}
	return cloneAlloc(a), nil
}

func (f *fakeCluster) WatchAllocation(ctx context.Context, id string, after uint64) (*restart.Alloc, uint64, error) {
	for {
		f.mu.Lock()
		a, ok := f.allocs[id]
		ch := f.changed
		if !ok {
			f.mu.Unlock()
			return nil, 0, cluster.ErrAllocNotFound
		}
		if a.ModifyIndex > after {
			c := cloneAlloc(a)
			f.mu.Unlock()
			return c, c.ModifyIndex, nil
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-ch:
		}
	}
}

func (f *fakeCluster) RestartTasks(ctx context.Context, id, task string, all bool) error {
	if err := ctx.Err(); err != nil {
		return err // a request is never sent on an ended context
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	before, lost := f.faultLocked("restart")
	if before {
		return errUnavailable
	}
	if err := f.permanent["restart"]; err != nil {
		return err
	}
	a := f.allocs[id]
	if a == nil {
		return cluster.ErrAllocNotFound
	}
	if a.ClientStatus != restart.ClientRunning || a.DesiredStatus != restart.DesiredRun {
		return errors.New("Unexpected response code: 500 (restart of an alloc that should not run)")
	}
	var targets []string
	for name, ts := range a.Tasks {
		if (task == "" && (all || ts.State == restart.TaskRunning)) || name == task {
			targets = append(targets, name)
		}
	}
	if task != "" {
		if ts, ok := a.Tasks[task]; !ok || ts.State != restart.TaskRunning {
			return errors.New("Unexpected response code: 500 (Task not running)")
		}
	}
	f.restarts[id]++
	f.taskStepLocked(a, targets, func(ts *restart.TaskState) {
		ts.Restarts++
		ts.State = restart.TaskPending
	}, restart.TaskEventRestartSignaled, restart.TaskEventRestarting)
	time.AfterFunc(f.startDelay, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.taskStepLocked(a, targets, func(ts *restart.TaskState) {
			ts.State, ts.StartedAt = restart.TaskRunning, f.clock // as its Started event
			if f.failStart[id] {
				ts.State, ts.Failed = restart.TaskDead, true
			}
		}, restart.TaskEventStarted)
		if f.crashAfter > 0 {
			time.AfterFunc(f.crashAfter, func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.taskStepLocked(a, targets, func(ts *restart.TaskState) {
					ts.State, ts.Failed = restart.TaskDead, true
				}, restart.TaskEventTerminated)
			})
		}
	})
	if lost {
		return errUnavailable
	}
	return nil
}

// taskStepLocked moves the allocation's tasks named through events (in order, each stamped
// by the fake's clock) and change, then wakes the allocation's watchers.
func (f *fakeCluster) taskStepLocked(a *restart.Alloc, tasks []string, change func(*restart.TaskState), events ...string) {
	for _, t := range tasks {
		ts := a.Tasks[t]
		for _, typ := range events {
			ts.Events = append(ts.Events, restart.TaskEvent{Type: typ, Time: f.tick()})
		}
		change(&ts)
		a.Tasks[t] = ts
	}
	f.bumpLocked(a)
}

func (f *fakeCluster) StopAlloc(ctx context.Context, id string, noDelay bool) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	before, lost := f.faultLocked("stop")
	if before {
		return 0, errUnavailable
	}
	a := f.allocs[id]
	if a == nil {
		return 0, cluster.ErrAllocNotFound
	}
	f.stops[id]++
	a.DesiredStatus = restart.DesiredStop
	f.bumpLocked(a)
	index := f.index
	if !f.noReplace && f.placement[a.Group] == nil {
		time.AfterFunc(f.startDelay, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			a.ClientStatus = restart.ClientComplete
			var k int
			fmt.Sscanf(a.Name[strings.Index(a.Name, "[")+1:], "%d", &k)
			n := f.addAlloc(a.Group, k, a.ID)
			a.NextAllocation = n.ID
			f.bumpLocked(a)
		})
	}
	if lost {
		return 0, errUnavailable
	}
	return index, nil
}

func (f *fakeCluster) ForceEvaluate(ctx context.Context, ns, jobID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evals++
	return nil
}

func (f *fakeCluster) WatchPlacementFailure(ctx context.Context, ns, jobID, group string, since uint64) (*cluster.PlacementFailure, error) {
	f.mu.Lock()
	pf := f.placement[group]
	f.mu.Unlock()
	if pf != nil {
		return pf, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeCluster) Region() string    { return "global" }
func (f *fakeCluster) Namespace() string { return "default" }

// counts returns a copy of the effective restart (or stop) counts per allocation.
func (f *fakeCluster) counts(stops bool) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	src := f.restarts
	if stops {
		src = f.stops
	}
	out := map[string]int{}
	for k, v := range src {
		out[k] = v
	}
	return out
}

func (f *fakeCluster) Job(ctx context.Context, ns, jobID string) (*restart.Job, error) {
	if jobID != f.job.ID {
		return nil, fmt.Errorf("reading job %q: %w", jobID, cluster.ErrJobNotFound)
	}
	return f.job, nil
}

// WatchJobAllocations is a blocking query on the job's allocations, woken by every change.
func (f *fakeCluster) WatchJobAllocations(ctx context.Context, ns, jobID string, after uint64) ([]*restart.Alloc, uint64, error) {
	for {
		f.mu.Lock()
		index, ch := f.index, f.changed
		f.mu.Unlock()
		if after == 0 || index > after {
			return f.JobAllocations(ctx, ns, jobID)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-ch:
		}
	}
}

// The fake has no event stream, no job specifications or summaries, no filters, no
// Nomad-native checks and no job scale endpoint: it answers as a cluster client without
// them, and the engine takes its fallbacks (blocking queries, reading the allocations,
// -health running) or refuses the flag.

func (f *fakeCluster) FollowJobAllocations(ctx context.Context, ns, jobID string, from uint64) <-chan cluster.AllocUpdate {
	return nil
}

func (f *fakeCluster) JobSpec(ctx context.Context, ns, jobID string) (*onchange.JobSpec, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) JobSummary(ctx context.Context, ns, jobID string) (*cluster.JobSummary, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) MatchingAllocations(ctx context.Context, ns, jobID, filter string) (map[string]bool, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) Nodes(ctx context.Context) ([]cluster.Node, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) AllocChecks(ctx context.Context, allocID string) ([]cluster.CheckResult, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) JobScale(ctx context.Context, ns, jobID string) (*restart.JobScale, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) ScaleGroup(ctx context.Context, ns, jobID, group string, count int, jmi uint64, msg string) (*cluster.ScaleResult, error) {
	return nil, cluster.ErrNotSupported
}

func (f *fakeCluster) LatestDeployment(ctx context.Context, ns, jobID string, after uint64) (*cluster.DeploymentState, uint64, error) {
	return nil, 0, cluster.ErrNotSupported
}

func (f *fakeCluster) FailDeployment(ctx context.Context, ns, deploymentID string) error {
	return cluster.ErrNotSupported
}

var _ cluster.Cluster = (*fakeCluster)(nil)
