// Package cluster is nomad-restart's view of a Nomad cluster: the Cluster interface the
// engine drives, and its implementation on the official github.com/hashicorp/nomad/api client.
// Watches use Nomad's blocking queries; nothing here polls on a fixed interval where Nomad
// offers a blocking query.
package cluster

import (
	"context"
	"errors"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Cluster is what the engine needs of Nomad. Every method honours ctx; errors are wrapped
// with the operation and the object's ID.
type Cluster interface {
	// ResolveJob finds a job by ID or unique prefix in namespace ("*" for all), as
	// `nomad job restart` does: a prefix list, then a read; without the list-jobs
	// permission the prefix is used as the literal ID. Errors: ErrJobNotFound,
	// *AmbiguousJobError, ErrPermissionDenied, or a transport error.
	ResolveJob(ctx context.Context, namespace, prefix string) (*restart.Job, error)
	// JobVersions returns the job's versions by version number (old versions may be gone).
	JobVersions(ctx context.Context, namespace, jobID string) (map[uint64]*restart.Job, error)
	// JobAllocations lists every allocation of the job (all=true), newest CreateIndex first,
	// with task states. It returns the index to watch from, or 0 where the list came
	// without one (the Nomad implementation streams it; watchers use WatchJobAllocations).
	JobAllocations(ctx context.Context, namespace, jobID string) ([]*restart.Alloc, uint64, error)
	// ActiveDeployment returns the job's deployment that is not terminal, or nil.
	ActiveDeployment(ctx context.Context, namespace, jobID string) (*Deployment, error)

	// Allocation reads one allocation with its task states; ErrAllocNotFound if unknown.
	Allocation(ctx context.Context, id string) (*restart.Alloc, error)
	// WatchAllocation blocks until the allocation's ModifyIndex passes afterIndex (or Nomad's
	// wait ends), then returns it and the index to watch from next.
	WatchAllocation(ctx context.Context, id string, afterIndex uint64) (*restart.Alloc, uint64, error)

	// RestartTasks restarts an allocation in place: the named task, or the running tasks
	// when task is "", or every task with allTasks. It returns once Nomad answered (the old
	// process exited); the task starts again afterwards.
	RestartTasks(ctx context.Context, allocID, task string, allTasks bool) error
	// StopAlloc stops an allocation so that the scheduler replaces it, and returns the index
	// of the write (placement failures are evaluations created at or after it).
	StopAlloc(ctx context.Context, allocID string, noShutdownDelay bool) (uint64, error)
	// ForceEvaluate creates an evaluation with ForceReschedule, needed for system jobs.
	ForceEvaluate(ctx context.Context, namespace, jobID string) error
	// WatchPlacementFailure blocks until an evaluation of the job created at or after
	// sinceIndex is blocked with failed placements for group, and returns it; it returns
	// only on ctx's end or an error otherwise.
	WatchPlacementFailure(ctx context.Context, namespace, jobID, group string, sinceIndex uint64) (*PlacementFailure, error)

	// Region is the region the client talks to.
	Region() string
}

// Deployment is what the restart guard needs of a deployment.
type Deployment struct {
	ID     string
	Status string
}

// PlacementFailure is a blocked evaluation that could not place a group's allocations.
type PlacementFailure struct {
	EvalID string
	Group  string
	// Reasons are lines like `Constraint "X": 1 nodes excluded by filter`, as Nomad's
	// command prints the allocation metrics.
	Reasons []string
}

// Errors the cluster reports, to be matched with errors.Is / errors.As.
var (
	ErrJobNotFound   = errors.New("job not found")
	ErrAllocNotFound = errors.New("alloc not found")
	//lint:ignore ST1005 Nomad's own text, which users search for
	ErrPermissionDenied = errors.New("Permission denied")
)

// AmbiguousJobError is returned when a prefix matches several jobs.
type AmbiguousJobError struct {
	Prefix string
	// Matches are "namespace/id" of the jobs the prefix matched.
	Matches []string
}

func (e *AmbiguousJobError) Error() string {
	return "prefix \"" + e.Prefix + "\" matched multiple jobs"
}
