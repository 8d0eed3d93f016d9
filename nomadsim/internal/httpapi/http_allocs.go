package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// allocStub is Nomad's AllocListStub: the api module's stub plus the DesiredTransition
// Nomad's server includes.
type allocStub struct {
	*api.AllocationListStub
	DesiredTransition api.DesiredTransition
}

// listStub is the allocation's list form.
func listStub(ar *sim.AllocRun, taskStates, resources bool) allocStub {
	a := ar.Alloc
	status, desc, states := ar.ServerClientFields()
	s := &api.AllocationListStub{
		ID: a.ID, EvalID: a.EvalID, Name: a.Name, Namespace: a.Namespace, NodeID: a.NodeID, NodeName: a.NodeName,
		JobID: a.JobID, JobType: ar.JobType, TaskGroup: a.TaskGroup,
		DesiredStatus: a.DesiredStatus, DesiredDescription: a.DesiredDescription,
		ClientStatus: status, ClientDescription: desc,
		DeploymentStatus: a.DeploymentStatus, FollowupEvalID: a.FollowupEvalID, NextAllocation: a.NextAllocation,
		RescheduleTracker: a.RescheduleTracker, PreemptedAllocations: a.PreemptedAllocations, PreemptedByAllocation: a.PreemptedByAllocation,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, CreateTime: a.CreateTime, ModifyTime: a.ModifyTime,
	}
	if a.Job != nil {
		s.JobVersion = sim.Deref(a.Job.Version)
	}
	if taskStates {
		s.TaskStates = states
	}
	if resources {
		s.AllocatedResources = a.AllocatedResources
	}
	return allocStub{AllocationListStub: s, DesiredTransition: a.DesiredTransition}
}

func (c *server) handleAllocations(w http.ResponseWriter, r *http.Request) {
	taskStates, resources := true, false
	if v := r.URL.Query().Get("task_states"); v != "" {
		taskStates, _ = strconv.ParseBool(v)
	}
	if v := r.URL.Query().Get("resources"); v != "" {
		resources, _ = strconv.ParseBool(v)
	}
	c.listRead(w, r, "read-job", func(q simhttp.Query, allowed func(ns string) bool) (uint64, any, error) {
		filter, err := newListFilter(q.Filter)
		if err != nil {
			return 0, nil, err
		}
		var list []*sim.AllocRun
		for _, ar := range c.Allocs {
			if (q.Namespace == "*" || ar.Alloc.Namespace == q.Namespace) && matchPrefix(ar.Alloc.ID, q.Prefix) && allowed(ar.Alloc.Namespace) {
				list = append(list, ar)
			}
		}
		sort.Slice(list, func(a, b int) bool { return list[a].Alloc.ID < list[b].Alloc.ID })
		out := make([]allocStub, 0, len(list))
		for _, ar := range list {
			// Nomad applies the filter to the allocation of its state store, not to the
			// stub it answers (allocFilterView).
			if filter.ev != nil {
				datum, err := allocFilterDatum(ar.View())
				if err != nil {
					return 0, nil, err
				}
				ok, err := filter.match(datum)
				if err != nil {
					return 0, nil, err
				}
				if !ok {
					continue
				}
			}
			out = append(out, listStub(ar, taskStates, resources))
		}
		return c.TableIndex(sim.TableAllocs), out, nil
	})
}

func (c *server) handleAllocation(w http.ResponseWriter, r *http.Request) {
	c.allocRead(w, r, sim.TableAllocs, func(ar *sim.AllocRun) (uint64, any, error) {
		return ar.Alloc.ModifyIndex, ar.View(), nil
	})
}

// allocRead is the shape of a blocking read of one allocation by the path's ID: read-job in
// its namespace, and a 404 when it is unknown; run reads it under c.Mu.
func (c *server) allocRead(w http.ResponseWriter, r *http.Request, table string, run func(ar *sim.AllocRun) (uint64, any, error)) {
	id := r.PathValue("id")
	check := func(simhttp.Query) error { return c.authorizeAlloc(r, id, "read-job") }
	c.checkedRead(w, r, check, func(simhttp.Query) (uint64, any, error) {
		ar := c.Allocs[id]
		if ar == nil {
			return c.TableIndex(table), nil, sim.NotFound("alloc not found")
		}
		return run(ar)
	})
}

// authorizeAlloc checks a capability in the namespace of the allocation (unknown
// allocations are left to the handler's 404).
func (c *server) authorizeAlloc(r *http.Request, id, capability string) error {
	if !c.Ext.ACL.Enabled() {
		return nil
	}
	c.Mu.Lock()
	ns := "default"
	if ar := c.Allocs[id]; ar != nil {
		ns = ar.Alloc.Namespace
	}
	c.Mu.Unlock()
	return c.authorize(r, ns, capability)
}

// allocStopResponse is Nomad's AllocStopResponse with its write meta.
type allocStopResponse struct {
	EvalID string
	Index  uint64
}

func (c *server) handleAllocStop(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	id := r.PathValue("id")
	noDelay := false
	if v := r.URL.Query().Get("no_shutdown_delay"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			simhttp.WriteError(w, fmt.Errorf("no_shutdown_delay value is not a boolean: %v", err))
			return
		}
		noDelay = b
	}
	if err := c.authorizeAlloc(r, id, "alloc-lifecycle"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.write(w, func() (uint64, any, error) {
		ar := c.Allocs[id]
		if ar == nil {
			return 0, nil, sim.NotFound("allocation not found")
		}
		j := c.Jobs[ar.Job]
		ar.Alloc.DesiredTransition.Migrate = sim.Ptr(true)
		ar.Alloc.DesiredTransition.NoShutdownDelay = sim.Ptr(noDelay)
		ar.Alloc.DesiredTransition.Reschedule = sim.Ptr(false)
		ar.TouchServer("AllocationUpdated")
		if j == nil {
			c.StopAlloc(ar, sim.DescMigrating, noDelay)
			i := c.Index.Current()
			return i, &allocStopResponse{Index: i}, nil
		}
		ev := c.CreateEval(j, "alloc-stop", sim.EvalOpts{})
		return ev.CreateIndex, &allocStopResponse{EvalID: ev.ID, Index: ev.CreateIndex}, nil
	})
}

func (c *server) handleAllocServices(w http.ResponseWriter, r *http.Request) {
	c.allocRead(w, r, sim.TableServices, func(ar *sim.AllocRun) (uint64, any, error) {
		out := []*api.ServiceRegistration{}
		for _, reg := range sim.SortedRegs(ar.Services) {
			if r := ar.Services[reg.ID]; r != nil && !r.Consul {
				out = append(out, reg)
			}
		}
		return c.TableIndex(sim.TableServices), out, nil
	})
}

// genericResponse is the body of client RPC answers such as restart: {"Index": 0}.
type genericResponse struct{ Index uint64 }

// restartRequest is the client restart body (AllTasks since Nomad 1.5).
type restartRequest struct {
	TaskName string
	AllTasks bool
}

func (c *server) handleAllocRestart(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost, http.MethodGet) {
		return
	}
	id := r.PathValue("id")
	var req restartRequest
	if r.Body != nil && r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			simhttp.WriteError(w, err)
			return
		}
	}
	if err := c.authorizeAlloc(r, id, "alloc-lifecycle"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if err := c.restartAlloc(r.Context(), id, req); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	simhttp.WriteJSON(w, genericResponse{})
}

// restartAlloc is the client's RestartAllocation: it returns once the restarted tasks'
// old processes have exited.
func (c *server) restartAlloc(ctx context.Context, id string, req restartRequest) error {
	if len(id) != 36 {
		// The server's state store looks the ID up in a UUID index, which refuses it.
		return simhttp.Errorf(http.StatusInternalServerError, "alloc lookup failed: index error: UUID must be 36 characters")
	}
	c.Mu.Lock()
	ar := c.Allocs[id]
	if ar == nil {
		c.Mu.Unlock()
		return sim.NotFound(fmt.Sprintf("Unknown allocation %q", id))
	}
	if req.AllTasks && req.TaskName != "" {
		c.Mu.Unlock()
		return simhttp.Errorf(http.StatusInternalServerError, "task name cannot be set when restarting all tasks")
	}
	var dones []chan struct{}
	if req.TaskName != "" {
		tr := ar.TasksByName[req.TaskName]
		if tr == nil {
			c.Mu.Unlock()
			return simhttp.Errorf(http.StatusInternalServerError, "Could not find task runner for task: "+req.TaskName)
		}
		done := make(chan struct{})
		if err := tr.Restart("User requested task to restart", done); err != nil {
			c.Mu.Unlock()
			return err
		}
		c.Mu.Unlock()
		return wait(ctx, done)
	}
	if !ar.Received || ar.Stopping || ar.Terminal() {
		c.Mu.Unlock()
		return simhttp.Errorf(http.StatusInternalServerError, "restart of an alloc that should not run")
	}
	// The group service hook's PreTaskRestart: group services are deregistered, the group
	// shutdown_delay is waited, and they are registered again, before any task restarts.
	ar.Restarting++
	ar.ServicesChanged()
	delay := time.Duration(0)
	if ar.Group.ShutdownDelay != nil {
		delay = *ar.Group.ShutdownDelay
	}
	c.Mu.Unlock()
	if delay > 0 {
		if err := wait(ctx, c.sleepCh(delay)); err != nil {
			c.endRestart(ar)
			return err
		}
	}
	c.Mu.Lock()
	ar.Restarting--
	ar.ServicesChanged()
	reason := "User requested running tasks to restart"
	if req.AllTasks {
		reason = "User requested all tasks to restart"
	}
	for _, tr := range ar.Tasks {
		done := make(chan struct{})
		if req.AllTasks {
			tr.ForceRestart(reason, done)
		} else if err := tr.Restart(reason, done); err != nil {
			continue // tasks not running are skipped
		}
		dones = append(dones, done)
	}
	if req.AllTasks {
		ar.Touch()
		ar.Progress()
	}
	c.Mu.Unlock()
	for _, d := range dones {
		if err := wait(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// endRestart ends the hold on group services of a restart abandoned during the delay.
func (c *server) endRestart(ar *sim.AllocRun) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	ar.Restarting--
	ar.ServicesChanged()
}

// sleepCh is closed after the simulated duration d.
func (c *server) sleepCh(d time.Duration) chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(c.Clock.Real(d), func() { close(ch) })
	return ch
}

func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *server) handleAllocChecks(w http.ResponseWriter, r *http.Request) {
	c.clientAllocRead(w, r, func(ar *sim.AllocRun) any { return ar.CheckStatuses() })
}

func (c *server) handleAllocStats(w http.ResponseWriter, r *http.Request) {
	c.clientAllocRead(w, r, func(ar *sim.AllocRun) any {
		ts := c.NowNano()
		out := &api.AllocResourceUsage{ResourceUsage: &api.ResourceUsage{MemoryStats: &api.MemoryStats{}, CpuStats: &api.CpuStats{}}, Tasks: map[string]*api.TaskResourceUsage{}, Timestamp: ts}
		for _, tr := range ar.Tasks {
			if tr.State != nil && tr.State.State == sim.TaskRunning {
				out.Tasks[tr.Task.Name] = &api.TaskResourceUsage{ResourceUsage: &api.ResourceUsage{MemoryStats: &api.MemoryStats{RSS: 16 << 20}, CpuStats: &api.CpuStats{Percent: 1}}, Timestamp: ts}
			}
		}
		return out
	})
}

// clientAllocRead answers a client endpoint about the allocation the path's ID names: no
// blocking query, no index; read-job in its namespace; an unknown allocation is the
// client's 404. read builds the answer under c.Mu.
func (c *server) clientAllocRead(w http.ResponseWriter, r *http.Request, read func(ar *sim.AllocRun) any) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	id := r.PathValue("id")
	if err := c.authorizeAlloc(r, id, "read-job"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.Mu.Lock()
	ar := c.Allocs[id]
	var out any
	if ar != nil {
		out = read(ar)
	}
	c.Mu.Unlock()
	if ar == nil {
		simhttp.WriteError(w, sim.NotFound(fmt.Sprintf("Unknown allocation %q", id)))
		return
	}
	simhttp.WriteJSON(w, out)
}
