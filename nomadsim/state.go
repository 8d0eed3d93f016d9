package nomadsim

import (
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Table names, as Nomad's state store names the tables whose index blocking queries watch.
const (
	tJobs        = "jobs"
	tAllocs      = "allocs"
	tEvals       = "evals"
	tDeployments = "deployment"
	tNodes       = "nodes"
	tNamespaces  = "namespaces"
	tServices    = "service_registrations"
	tScaling     = "scaling_event"
)

// jobKey names a job within its namespace.
type jobKey struct{ ns, id string }

// jobEntry is a job with every version kept, as Nomad keeps them (job_version table).
type jobEntry struct {
	key      jobKey
	versions []*api.Job // ascending by Version; the last is the current job
	// scaleEvents per group, newest first, as Nomad answers them.
	scaleEvents map[string][]api.ScalingEvent
	// allocs of this job by ID.
	allocs map[string]*allocRun
	// evals and deployments of this job, in creation order.
	evals       []*api.Evaluation
	deployments []*api.Deployment
	// submissions holds the job sources sent with registrations, by version.
	submissions map[uint64]*api.JobSubmission
	modifyIndex uint64
}

func (j *jobEntry) current() *api.Job { return j.versions[len(j.versions)-1] }

// version returns the job at version v, or nil.
func (j *jobEntry) version(v uint64) *api.Job {
	for _, jv := range j.versions {
		if *jv.Version == v {
			return jv
		}
	}
	return nil
}

// latestDeployment is the job's most recently created deployment, or nil.
func (j *jobEntry) latestDeployment() *api.Deployment {
	if len(j.deployments) == 0 {
		return nil
	}
	return j.deployments[len(j.deployments)-1]
}

// sortedAllocs returns the job's allocations ordered by ID, as Nomad's state store lists them.
func (j *jobEntry) sortedAllocs() []*allocRun {
	out := make([]*allocRun, 0, len(j.allocs))
	for _, a := range j.allocs {
		out = append(out, a)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].a.ID < out[k].a.ID })
	return out
}

// simNode is a simulated client node.
type simNode struct {
	n      *api.Node
	allocs map[string]*allocRun
	// used resources by non-terminal allocations.
	usedCPU, usedMem int
	// allocSync: allocations changed on the client since the last tick, whether a tick is
	// armed, and the ticker's phase from the cluster's start.
	dirty     []*allocRun
	syncArmed bool
	syncPhase time.Duration
}

func (n *simNode) stub() *api.NodeListStub {
	return &api.NodeListStub{
		Address:               n.n.Attributes["unique.network.ip-address"],
		ID:                    n.n.ID,
		Datacenter:            n.n.Datacenter,
		Name:                  n.n.Name,
		NodeClass:             n.n.NodeClass,
		NodePool:              n.n.NodePool,
		Version:               n.n.Attributes["nomad.version"],
		Drain:                 n.n.Drain,
		SchedulingEligibility: n.n.SchedulingEligibility,
		Status:                n.n.Status,
		StatusDescription:     n.n.StatusDescription,
		Drivers:               n.n.Drivers,
		LastDrain:             n.n.LastDrain,
		CreateIndex:           n.n.CreateIndex,
		ModifyIndex:           n.n.ModifyIndex,
	}
}

// matchPrefix reports whether id has the prefix (Nomad's prefix lookups are plain prefixes).
func matchPrefix(id, prefix string) bool { return strings.HasPrefix(id, prefix) }

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Task states, as Nomad's structs name them.
const (
	taskPending = "pending"
	taskRunning = "running"
	taskDead    = "dead"
)

// Job statuses and the health-check mode, as Nomad's structs name them.
const (
	jobPending = "pending"
	jobRunning = "running"
	jobDead    = "dead"

	healthCheckTaskStates = "task_states"
)
