// Package cluster is nomad-restart's view of a Nomad cluster: the Cluster interface the
// engine drives, and its implementation on the official github.com/hashicorp/nomad/api client.
// Watches use Nomad's blocking queries; nothing here polls on a fixed interval where Nomad
// offers a blocking query.
package cluster

import (
	"context"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Cluster is everything the engine needs of Nomad, said by the small interfaces below, so
// that the engine never reaches past it (no type assertion, no raw client) and a test fake
// that implements it runs the engine's production paths. Every method honours ctx; reads
// retry transient failures inside (see Retry), so callers do not wrap them in another
// retry; errors are wrapped with the operation and the object's ID unless a method says
// otherwise.
type Cluster interface {
	JobReader
	AllocReader
	JobAllocWatcher
	AllocFollower
	AllocWriter
	Targeter
	Scaler
	CheckReader

	// Region is the region the client talks to.
	Region() string
	// Namespace is the namespace of a request that names none: the client's (-namespace or
	// NOMAD_NAMESPACE), else Nomad's "default".
	Namespace() string
}

// JobReader reads jobs: their restart-relevant view, versions, full specification and
// summary, and their deployments.
type JobReader interface {
	// ResolveJob finds a job by ID or unique prefix in namespace ("*" for all), as
	// `nomad job restart` does: a prefix list, then a read; without the list-jobs
	// permission the prefix is used as the literal ID. Errors: ErrJobNotFound,
	// *AmbiguousJobError, ErrPermissionDenied, or a transport error.
	ResolveJob(ctx context.Context, namespace, prefix string) (*restart.Job, error)
	// Job reads a job by its exact ID in its namespace, in one request. ErrJobNotFound when
	// there is none.
	Job(ctx context.Context, namespace, jobID string) (*restart.Job, error)
	// JobVersions returns the job's versions by version number (old versions may be gone).
	JobVersions(ctx context.Context, namespace, jobID string) (map[uint64]*restart.Job, error)
	// JobSpec reads the job's full specification (services, checks, update blocks, task
	// lifecycles, meta, templates), for the readiness gate, and the job's planning view
	// from the same read (JobSpec.Job, its namespace the one read in when the
	// specification names none). Its error is Nomad's answer, classified (see
	// ErrJobNotFound) but not prefixed: the caller names the job. ErrNotSupported when the
	// client cannot read specifications.
	JobSpec(ctx context.Context, namespace, jobID string) (*onchange.JobSpec, error)
	// JobSummary reads the job's allocations counted by group and client status, as Nomad
	// keeps them: one small read where listing the allocations grows with the job.
	// ErrNotSupported when the client has no summary.
	JobSummary(ctx context.Context, namespace, jobID string) (*JobSummary, error)
	// ActiveDeployment returns the job's deployment that is not terminal, or nil.
	ActiveDeployment(ctx context.Context, namespace, jobID string) (*Deployment, error)
}

// AllocReader reads allocations and watches them one at a time.
type AllocReader interface {
	// JobAllocations lists every allocation of the job (all=true), newest CreateIndex first,
	// with task states. It returns the index to watch from, or 0 where the list came
	// without one (the Nomad implementation streams it; watchers use WatchJobAllocations).
	JobAllocations(ctx context.Context, namespace, jobID string) ([]*restart.Alloc, uint64, error)
	// Allocation reads one allocation with its task states; ErrAllocNotFound if unknown.
	Allocation(ctx context.Context, id string) (*restart.Alloc, error)
	// WatchAllocation blocks until the allocation's ModifyIndex passes afterIndex (or Nomad's
	// wait ends), then returns it and the index to watch from next.
	WatchAllocation(ctx context.Context, id string, afterIndex uint64) (*restart.Alloc, uint64, error)
	// WatchPlacementFailure blocks until an evaluation of the job created at or after
	// sinceIndex is blocked with failed placements for group, and returns it; it returns
	// only on ctx's end or an error otherwise.
	WatchPlacementFailure(ctx context.Context, namespace, jobID, group string, sinceIndex uint64) (*PlacementFailure, error)
}

// AllocWriter changes allocations and schedules evaluations.
type AllocWriter interface {
	// RestartTasks restarts an allocation in place: the named task, or the running tasks
	// when task is "", or every task with allTasks. It returns once Nomad answered (the old
	// process exited); the task starts again afterwards.
	RestartTasks(ctx context.Context, allocID, task string, allTasks bool) error
	// StopAlloc stops an allocation so that the scheduler replaces it, and returns the index
	// of the write (placement failures are evaluations created at or after it).
	StopAlloc(ctx context.Context, allocID string, noShutdownDelay bool) (uint64, error)
	// ForceEvaluate creates an evaluation with ForceReschedule, needed for system jobs. It
	// is safe to repeat: its caller retries it.
	ForceEvaluate(ctx context.Context, namespace, jobID string) error
}

// Targeter answers what -filter, -node and -datacenter need. Its errors are Nomad's
// answers, classified but not prefixed, for the caller to quote with the flag they concern.
type Targeter interface {
	// MatchingAllocations returns the IDs of the job's allocations that Nomad's filter
	// expression filter (over an allocation's fields) matches. ErrNotSupported when the
	// client cannot evaluate filters.
	MatchingAllocations(ctx context.Context, namespace, jobID, filter string) (map[string]bool, error)
	// Nodes lists the cluster's nodes (the token needs node:read). ErrNotSupported when
	// the client cannot list nodes.
	Nodes(ctx context.Context) ([]Node, error)
}

// Node is what targeting needs of a client node.
type Node struct {
	ID, Name, Datacenter string
}

// JobSummary is a job's allocations counted by group (Nomad's job summary).
type JobSummary struct {
	Summary map[string]GroupSummary
}

// GroupSummary counts one group's allocations by client status.
type GroupSummary struct {
	Queued, Starting, Running int
}

// Deployment is what the restart guard needs of a deployment.
type Deployment struct {
	ID          string
	Status      string
	ModifyIndex uint64
}

// Active reports whether the deployment is not terminal (neither successful, failed nor
// cancelled), as Nomad's command checks before restarting.
func (d *Deployment) Active() bool { return deploymentActive(d.Status) }

// PlacementFailure is a blocked evaluation that could not place a group's allocations.
type PlacementFailure struct {
	EvalID string
	Group  string
	// Reasons are lines like `Constraint "X": 1 nodes excluded by filter`, as Nomad's
	// command prints the allocation metrics.
	Reasons []string
}
