package sim

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// Table names, as Nomad's state store names the tables whose index blocking queries watch.
const (
	TableJobs        = "jobs"
	TableAllocs      = "allocs"
	TableEvals       = "evals"
	TableDeployments = "deployment"
	TableNodes       = "nodes"
	TableNamespaces  = "namespaces"
	TableServices    = "service_registrations"
	TableScaling     = "scaling_event"
)

// JobKey names a job within its namespace.
type JobKey struct{ Namespace, ID string }

// JobEntry is a job with every version kept, as Nomad keeps them (job_version table).
type JobEntry struct {
	Key      JobKey
	Versions []*api.Job // ascending by Version; the last is the current job
	// ScaleEvents per group, newest first, as Nomad answers them.
	ScaleEvents map[string][]api.ScalingEvent
	// Allocs of this job by ID.
	Allocs map[string]*AllocRun
	// Evals and deployments of this job, in creation order.
	Evals       []*api.Evaluation
	Deployments []*api.Deployment
	// Submissions holds the job sources sent with registrations, by version.
	Submissions map[uint64]*api.JobSubmission
	modifyIndex uint64
}

func (j *JobEntry) Current() *api.Job { return j.Versions[len(j.Versions)-1] }

// version returns the job at version v, or nil.
func (j *JobEntry) VersionAt(v uint64) *api.Job {
	for _, jv := range j.Versions {
		if *jv.Version == v {
			return jv
		}
	}
	return nil
}

// LatestDeployment is the job's most recently created deployment, or nil.
func (j *JobEntry) LatestDeployment() *api.Deployment {
	if len(j.Deployments) == 0 {
		return nil
	}
	return j.Deployments[len(j.Deployments)-1]
}

// SortedAllocs returns the job's allocations ordered by ID, as Nomad's state store lists them.
func (j *JobEntry) SortedAllocs() []*AllocRun { return allocsByID(j.Allocs) }

// allocsByID lists allocations ordered by ID, as Nomad's state store lists them (and so
// that what is armed for each is armed in an order the seed decides).
func allocsByID(allocs map[string]*AllocRun) []*AllocRun {
	return slices.SortedFunc(maps.Values(allocs), func(a, b *AllocRun) int { return strings.Compare(a.Alloc.ID, b.Alloc.ID) })
}

// simNode is a simulated client node.
type simNode struct {
	Node   *api.Node
	Allocs map[string]*AllocRun
	// used resources by non-terminal allocations.
	usedCPU, usedMem int
	// allocSync: allocations changed on the client since the last tick, whether a tick is
	// armed, and the ticker's phase from the cluster's start.
	dirty     []*AllocRun
	syncArmed bool
	syncPhase time.Duration
}

func (n *simNode) Stub() *api.NodeListStub {
	return &api.NodeListStub{
		Address:               n.Node.Attributes["unique.network.ip-address"],
		ID:                    n.Node.ID,
		Datacenter:            n.Node.Datacenter,
		Name:                  n.Node.Name,
		NodeClass:             n.Node.NodeClass,
		NodePool:              n.Node.NodePool,
		Version:               n.Node.Attributes["nomad.version"],
		Drain:                 n.Node.Drain,
		SchedulingEligibility: n.Node.SchedulingEligibility,
		Status:                n.Node.Status,
		StatusDescription:     n.Node.StatusDescription,
		Drivers:               n.Node.Drivers,
		LastDrain:             n.Node.LastDrain,
		CreateIndex:           n.Node.CreateIndex,
		ModifyIndex:           n.Node.ModifyIndex,
	}
}

func Ptr[T any](v T) *T { return &v }

func Deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Task states, as Nomad's structs name them.
const (
	TaskPending = "pending"
	TaskRunning = "running"
	taskDead    = "dead"
)

// Job statuses and the health-check mode, as Nomad's structs name them.
const (
	jobPending = "pending"
	jobRunning = "running"
	jobDead    = "dead"

	healthCheckTaskStates = "task_states"
)

// NotFound is Nomad's 404 with its text.
func NotFound(text string) error { return simhttp.Errorf(http.StatusNotFound, text) }
