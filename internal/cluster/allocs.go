package cluster

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

type allocAt struct {
	alloc *api.Allocation
	index uint64
}

func (n *Nomad) readAlloc(ctx context.Context, id string, waitIndex uint64) (allocAt, error) {
	a, index, err := watchRead(ctx, n, "reading allocation", "", waitIndex, func(q *api.QueryOptions) (*api.Allocation, *api.QueryMeta, error) {
		return n.client.Allocations().Info(id, q)
	})
	if err != nil {
		return allocAt{}, fmt.Errorf("reading allocation %q: %w", id, classify(err, ErrAllocNotFound))
	}
	return allocAt{alloc: a, index: index}, nil
}

// Allocation reads one allocation with its task states.
func (n *Nomad) Allocation(ctx context.Context, id string) (*restart.Alloc, error) {
	r, err := n.readAlloc(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	return convertAlloc(r.alloc), nil
}

// WatchAllocation blocks until the allocation's ModifyIndex is above afterIndex, then
// returns it and the index to watch from next. Nomad answers a blocking read of one
// allocation when that allocation changes (its X-Nomad-Index is then the allocation's
// ModifyIndex) or when the wait ends; a wait that ends without change is renewed here, and
// an answer that does not pass afterIndex (a proxy, an agent answering early) is skipped,
// until the allocation changed or ctx ends. With afterIndex 0 the first answer is returned.
func (n *Nomad) WatchAllocation(ctx context.Context, id string, afterIndex uint64) (*restart.Alloc, uint64, error) {
	waitIndex := afterIndex
	pace := pacer{policy: n.retry}
	for {
		r, err := n.readAlloc(ctx, id, waitIndex)
		if err != nil {
			return nil, 0, err
		}
		if r.alloc.ModifyIndex > afterIndex || afterIndex == 0 {
			return convertAlloc(r.alloc), max(r.index, r.alloc.ModifyIndex), nil
		}
		// Never wait on an index lower than the caller's: it would answer at once.
		progressed := r.index > waitIndex
		waitIndex = max(r.index, afterIndex)
		if !pace.next(ctx, progressed) {
			return nil, 0, fmt.Errorf("watching allocation %q: %w", id, ctx.Err())
		}
	}
}

// WatchJobAllocations blocks until an allocation of the job changed after afterIndex (its
// ModifyIndex is above it, which includes new allocations), then returns every allocation
// of the job (all=true, newest CreateIndex first, as list stubs: Tasks from the stubs'
// TaskStates, no PreviousAllocation) and the index to watch from next. With afterIndex 0
// the first answer is returned.
//
// Nomad's job allocations endpoint answers with the index of the whole allocations table,
// so a read from an index that another job's allocation has since passed answers at once
// with nothing new for this job: such answers are skipped and the watch renewed from the
// newer index, where Nomad then waits on this job's allocations only.
//
// One such watch serves a whole batch, where WatchAllocation holds one blocking query per
// allocation; but each answer carries every allocation of the job (about 1.5 KB per
// allocation with task events), so it pays off for batches of many allocations of jobs
// that are not huge. See the measurements in this package's benchmarks.
func (n *Nomad) WatchJobAllocations(ctx context.Context, namespace, jobID string, afterIndex uint64) ([]*restart.Alloc, uint64, error) {
	waitIndex := afterIndex
	pace := pacer{policy: n.retry}
	for {
		stubs, idx, err := n.jobAllocations(ctx, namespace, jobID, waitIndex)
		if err != nil {
			return nil, 0, err
		}
		changed := afterIndex == 0
		for _, s := range stubs {
			if s.ModifyIndex > afterIndex {
				changed = true
				break
			}
		}
		if changed {
			return convertStubs(stubs), max(idx, afterIndex), nil
		}
		progressed := idx > waitIndex
		waitIndex = max(idx, afterIndex)
		if !pace.next(ctx, progressed) {
			return nil, 0, fmt.Errorf("watching allocations of job %q: %w", jobID, ctx.Err())
		}
	}
}

// RestartTasks restarts an allocation in place through the client node: the named task, or
// the running tasks when task is "", or every task (including finished lifecycle tasks)
// with allTasks. Nomad answers once the old processes have exited; the tasks start again
// afterwards. The request is not retried unless it provably never reached Nomad: a restart
// sent twice restarts twice. Since the answer waits for the tasks' shutdown_delay and
// kill_timeout, only ctx bounds the wait for it (the caller's healthy deadline), not the
// request timeout.
func (n *Nomad) RestartTasks(ctx context.Context, allocID, task string, allTasks bool) error {
	alloc := &api.Allocation{ID: allocID}
	_, err := write(upstream.Unbounded(ctx), n, "restarting allocation", func(ctx context.Context) (struct{}, error) {
		q := queryOpts(ctx, "")
		if allTasks {
			return struct{}{}, n.client.Allocations().RestartAllTasks(alloc, q)
		}
		return struct{}{}, n.client.Allocations().Restart(alloc, task, q)
	})
	if err == nil {
		return nil
	}
	what := "running tasks"
	switch {
	case allTasks:
		what = "all tasks"
	case task != "":
		what = fmt.Sprintf("task %q", task)
	}
	return fmt.Errorf("restarting %s of allocation %q: %w", what, allocID, classify(err, ErrAllocNotFound))
}

// StopAlloc stops an allocation so that the scheduler replaces it (Nomad marks it for
// migration), and returns the index of the write: evaluations of the replacement, and any
// placement failure, are created at or after it. It is not retried unless the request
// provably never reached Nomad.
func (n *Nomad) StopAlloc(ctx context.Context, allocID string, noShutdownDelay bool) (uint64, error) {
	alloc := &api.Allocation{ID: allocID}
	resp, err := write(ctx, n, "stopping allocation", func(ctx context.Context) (*api.AllocStopResponse, error) {
		q := queryOpts(ctx, "")
		if noShutdownDelay {
			q.Params = map[string]string{"no_shutdown_delay": "true"}
		}
		return n.client.Allocations().Stop(alloc, q)
	})
	if err != nil {
		return 0, fmt.Errorf("stopping allocation %q: %w", allocID, classify(err, ErrAllocNotFound))
	}
	if resp.LastIndex != 0 {
		return resp.LastIndex, nil
	}
	// The api takes the index from the X-Nomad-Index header only (the body's Index is not
	// decoded). Without it, the stopped allocation's ModifyIndex is the stop's index: an
	// index of 0 would make every blocked evaluation ever created look like a failure of
	// this stop.
	r, err := n.readAlloc(ctx, allocID, 0)
	if err != nil {
		return 0, fmt.Errorf("allocation %q stopped, but reading its index failed: %w", allocID, err)
	}
	return r.alloc.ModifyIndex, nil
}
