package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-bexpr"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// rpcError is an error Nomad's servers answer a read's RPC with, such as a filter they cannot
// read or apply. Nomad's HTTP agent sets a read's X-Nomad-* headers from the RPC's reply, so
// it writes these errors without them (unlike a read that found nothing, a 404 with the
// headers).
type rpcError struct{ answer *simhttp.Error }

func (e *rpcError) Error() string { return e.answer.Text }

// writeRPCError answers err and reports true when it is an *rpcError; it writes nothing
// otherwise.
func writeRPCError(w http.ResponseWriter, err error) bool {
	var rpc *rpcError
	if !errors.As(err, &rpc) {
		return false
	}
	simhttp.WriteError(w, rpc.answer)
	return true
}

// listFilter is a list endpoint's filter expression, read as Nomad's result paginator reads
// it (nomad/state/paginator): its creation fails on an expression that does not parse, its
// pages on an object the expression cannot be applied to.
type listFilter struct {
	ev *bexpr.Evaluator // nil: no filter, everything matches
}

// newListFilter reads expr ("" for no filter), with Nomad's 400 when it does not parse.
func newListFilter(expr string) (*listFilter, error) {
	if expr == "" {
		return &listFilter{}, nil
	}
	ev, err := bexpr.CreateEvaluator(expr)
	if err != nil {
		return nil, &rpcError{simhttp.Errorf(http.StatusBadRequest,
			fmt.Sprintf("failed to create result paginator: failed to read filter expression: %v", err))}
	}
	return &listFilter{ev: ev}, nil
}

// match applies the filter to datum, the object Nomad's state store holds, with Nomad's 400
// when it cannot be applied (a field the object does not have, an operator its type has not).
func (f *listFilter) match(datum any) (bool, error) {
	if f.ev == nil {
		return true, nil
	}
	ok, err := f.ev.Evaluate(datum)
	if err != nil {
		return false, &rpcError{simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("failed to read result page: %v", err))}
	}
	return ok, nil
}

// filterList applies a filter expression to a list of the API's stubs, as Nomad's list
// endpoints do. It evaluates the stubs' JSON form (which flattens the embedded stubs), where
// Nomad evaluates the objects of its state store: so a selector that finds no value (a field
// the JSON form lacks or holds as null, where Nomad's object may hold a zero value or an
// empty map) drops the item rather than failing the list.
func filterList[T any](expr string, items []T) ([]T, error) {
	f, err := newListFilter(expr)
	if err != nil || f.ev == nil {
		return items, err
	}
	out := items[:0:0]
	for _, it := range items {
		m, err := jsonForm(it)
		if err != nil {
			return nil, err
		}
		ok, err := f.match(m)
		if err != nil {
			if strings.Contains(err.Error(), "error finding value in datum") {
				continue
			}
			return nil, err
		}
		if ok {
			out = append(out, it)
		}
	}
	return out, nil
}

// jsonForm is v as encoding/json decodes its JSON into an empty interface.
func jsonForm(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m any
	err = json.Unmarshal(b, &m)
	return m, err
}

// jobFilterView is the job as a filter on Nomad's jobs list sees it: Nomad applies the
// expression to the job of its state store (nomad/structs.Job), not to the stub it answers,
// so `Meta.team == "core"` selects whether or not the list shows Meta, and a field of the
// stub alone (JobSummary) fails the list. The top-level fields have structs.Job's names and
// value types, so that `ParentID == ""` and `Stop == false` hold where the API's job holds
// nil, and Periodic and ParameterizedJob are the configurations (not the stub's booleans);
// the nested blocks are the API's types.
type jobFilterView struct {
	Stop                     bool
	Region                   string
	Namespace                string
	ID                       string
	ParentID                 string
	Name                     string
	Type                     string
	Priority                 int
	AllAtOnce                bool
	Datacenters              []string
	NodePool                 string
	Constraints              []*api.Constraint
	Affinities               []*api.Affinity
	Spreads                  []*api.Spread
	TaskGroups               []*api.TaskGroup
	Update                   updateFilterView
	Multiregion              *api.Multiregion
	Periodic                 *api.PeriodicConfig
	ParameterizedJob         *api.ParameterizedJobConfig
	Dispatched               bool
	DispatchIdempotencyToken string
	Payload                  []byte
	Meta                     map[string]string
	ConsulNamespace          string
	VaultNamespace           string
	NomadTokenID             string
	Status                   string
	StatusDescription        string
	Stable                   bool
	Version                  uint64
	SubmitTime               int64
	CreateIndex              uint64
	ModifyIndex              uint64
	JobModifyIndex           uint64
	UI                       *api.JobUIConfig
	VersionTag               *api.JobVersionTag
}

// updateFilterView is a job's update block as Nomad's state store holds it
// (nomad/structs.UpdateStrategy): values, not pointers.
type updateFilterView struct {
	Stagger          time.Duration
	MaxParallel      int
	HealthCheck      string
	MinHealthyTime   time.Duration
	HealthyDeadline  time.Duration
	ProgressDeadline time.Duration
	AutoRevert       bool
	AutoPromote      bool
	Canary           int
}

// jobFilterDatum is job as a filter on the jobs list evaluates it.
func jobFilterDatum(job *api.Job) (*jobFilterView, error) {
	b, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("encoding job %s for its filter: %w", sim.Deref(job.ID), err)
	}
	var v jobFilterView
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decoding job %s for its filter: %w", sim.Deref(job.ID), err)
	}
	return &v, nil
}

// allocFilterView is the allocation as a filter on Nomad's allocations list sees it: Nomad
// applies the expression to the allocation of its state store (nomad/structs.Allocation;
// nomad/alloc_endpoint.go List hands its paginator the state's objects, and
// nomad/state/paginator evaluates the filter on them before it makes their stubs), not to
// the stub it answers. So a field of the stub alone (JobType, JobVersion) or a field no
// allocation has fails the list with a 400, as `Nopefield == "x"` does. The top-level
// fields have structs.Allocation's names; the nested values are the API's types, and Job is
// the job as the jobs list's filter sees it.
type allocFilterView struct {
	ID        string
	Namespace string
	EvalID    string
	Name      string
	NodeID    string
	NodeName  string
	JobID     string
	Job       *jobFilterView
	TaskGroup string
	// Resources, SharedResources and TaskResources are the old forms of AllocatedResources,
	// which the sim does not keep: a filter on them finds no value (a nil pointer or map)
	// where Nomad's may.
	Resources             *api.Resources
	SharedResources       *api.Resources
	TaskResources         map[string]*api.Resources
	AllocatedResources    *api.AllocatedResources
	Metrics               *api.AllocationMetric
	DesiredStatus         string
	DesiredDescription    string
	DesiredTransition     api.DesiredTransition
	ClientStatus          string
	ClientDescription     string
	TaskStates            map[string]*api.TaskState
	AllocStates           []*allocStateView
	PreviousAllocation    string
	NextAllocation        string
	DeploymentID          string
	DeploymentStatus      *api.AllocDeploymentStatus
	RescheduleTracker     *api.RescheduleTracker
	NetworkStatus         *api.AllocNetworkStatus
	FollowupEvalID        string
	PreemptedAllocations  []string
	PreemptedByAllocation string
	SignedIdentities      map[string]string
	SigningKeyID          string
	CreateIndex           uint64
	ModifyIndex           uint64
	AllocModifyIndex      uint64
	CreateTime            int64
	ModifyTime            int64
}

// allocFilterDatum is the allocation a as a filter on the allocations list evaluates it.
func allocFilterDatum(a *api.Allocation) (*allocFilterView, error) {
	v := &allocFilterView{
		ID: a.ID, Namespace: a.Namespace, EvalID: a.EvalID, Name: a.Name, NodeID: a.NodeID, NodeName: a.NodeName,
		JobID: a.JobID, TaskGroup: a.TaskGroup, AllocatedResources: a.AllocatedResources, Metrics: a.Metrics, DesiredStatus: a.DesiredStatus,
		DesiredDescription: a.DesiredDescription, DesiredTransition: a.DesiredTransition, ClientStatus: a.ClientStatus,
		ClientDescription: a.ClientDescription, TaskStates: a.TaskStates, PreviousAllocation: a.PreviousAllocation,
		NextAllocation: a.NextAllocation, DeploymentID: a.DeploymentID, DeploymentStatus: a.DeploymentStatus,
		RescheduleTracker: a.RescheduleTracker, NetworkStatus: a.NetworkStatus, FollowupEvalID: a.FollowupEvalID,
		PreemptedAllocations: a.PreemptedAllocations, PreemptedByAllocation: a.PreemptedByAllocation,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, AllocModifyIndex: a.AllocModifyIndex,
		CreateTime: a.CreateTime, ModifyTime: a.ModifyTime,
	}
	if a.Job != nil {
		j, err := jobFilterDatum(a.Job)
		if err != nil {
			return nil, err
		}
		v.Job = j
	}
	return v, nil
}

// allocStateView is structs.AllocState, an entry of an allocation's history of client
// status changes (the sim keeps none).
type allocStateView struct {
	Field uint8
	Value string
	Time  time.Time
}
