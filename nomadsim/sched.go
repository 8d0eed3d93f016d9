package nomadsim

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// The simulated scheduler: evaluations are processed at once, under the state lock, by a
// reconciler that follows Nomad's generic (service, batch) and system (system, sysbatch)
// schedulers in the cases the simulation covers.

// Desired descriptions, as Nomad's reconciler writes them.
const (
	descNotNeeded   = "alloc not needed due to job update"
	descUpdating    = "alloc is being updated due to job update"
	descMigrating   = "alloc is being migrated"
	descRescheduled = "alloc was rescheduled because it failed"
	descLost        = "alloc is lost since its node is down"
	descCanaryDone  = "alloc not needed as canary was promoted"
)

type evalOpts struct {
	nodeID          string
	forceReschedule bool
	deploymentID    string
}

// createEval records and processes an evaluation for the job. Callers hold c.mu.
func (c *Cluster) createEval(j *jobEntry, trigger string, o evalOpts) *api.Evaluation {
	job := j.current()
	i := c.bump(tEvals)
	now := c.nowNano()
	ev := &api.Evaluation{
		ID: c.newID(), Priority: deref(job.Priority), Type: deref(job.Type), TriggeredBy: trigger,
		Namespace: j.key.ns, JobID: j.key.id, JobModifyIndex: deref(job.JobModifyIndex),
		NodeID: o.nodeID, DeploymentID: o.deploymentID, Status: api.EvalStatusPending,
		CreateIndex: i, ModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	c.evals[ev.ID] = ev
	j.evals = append(j.evals, ev)
	c.publishEval(ev)
	c.process(j, ev, o)
	return ev
}

// process runs the scheduler for an evaluation and completes (or blocks) it.
func (c *Cluster) process(j *jobEntry, ev *api.Evaluation, o evalOpts) {
	job := j.current()
	ev.SnapshotIndex = c.idx.Current()
	plan := &evalPlan{ev: ev, failed: map[string]*api.AllocationMetric{}, queued: map[string]int{}, desired: map[string]*api.DesiredUpdates{}}
	switch deref(job.Type) {
	case api.JobTypeSystem, api.JobTypeSysbatch:
		c.reconcileSystem(j, job, plan, o)
	default:
		c.reconcileGeneric(j, job, plan, o)
	}
	i := c.bump(tEvals)
	ev.ModifyIndex, ev.ModifyTime = i, c.nowNano()
	ev.QueuedAllocations = plan.queued
	ev.PlanAnnotations = &api.PlanAnnotations{DesiredTGUpdates: plan.desired}
	if len(plan.failed) > 0 {
		ev.FailedTGAllocs = plan.failed
		if ev.Status == api.EvalStatusBlocked {
			// A reprocessed blocked evaluation stays blocked.
			c.publishEval(ev)
			return
		}
		c.blockEval(j, ev)
	} else if ev.Status == api.EvalStatusBlocked {
		ev.FailedTGAllocs = nil
	}
	ev.Status = api.EvalStatusComplete
	c.publishEval(ev)
	c.jobChanged(j.key)
}

type evalPlan struct {
	ev      *api.Evaluation
	failed  map[string]*api.AllocationMetric
	queued  map[string]int
	desired map[string]*api.DesiredUpdates
}

func (p *evalPlan) du(tg string) *api.DesiredUpdates {
	d := p.desired[tg]
	if d == nil {
		d = &api.DesiredUpdates{}
		p.desired[tg] = d
	}
	return d
}

// blockEval creates the blocked evaluation Nomad leaves for placements that failed.
func (c *Cluster) blockEval(j *jobEntry, ev *api.Evaluation) {
	for _, other := range j.evals {
		if other.Status == api.EvalStatusBlocked {
			// One blocked evaluation per job: the new one supersedes the old.
			other.Status = api.EvalStatusCancelled
			other.StatusDescription = "evaluation superseded"
			other.ModifyIndex = c.bump(tEvals)
			c.publishEval(other)
		}
	}
	i := c.bump(tEvals)
	now := c.nowNano()
	b := &api.Evaluation{
		ID: c.newID(), Priority: ev.Priority, Type: ev.Type, TriggeredBy: "queued-allocs",
		Namespace: ev.Namespace, JobID: ev.JobID, JobModifyIndex: ev.JobModifyIndex,
		Status: api.EvalStatusBlocked, StatusDescription: "created to place remaining allocations",
		PreviousEval: ev.ID, FailedTGAllocs: ev.FailedTGAllocs, SnapshotIndex: ev.SnapshotIndex,
		ClassEligibility: map[string]bool{}, CreateIndex: i, ModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	ev.BlockedEval = b.ID
	c.evals[b.ID] = b
	j.evals = append(j.evals, b)
	c.publishEval(b)
}

// unblockSoon retries blocked evaluations once, shortly, after capacity was freed.
func (c *Cluster) unblockSoon() {
	if c.unblockArmed {
		return
	}
	c.unblockArmed = true
	c.after(0, func() {
		c.unblockArmed = false
		c.unblockEvals()
	})
}

// unblockEvals reprocesses every blocked evaluation. Callers hold c.mu.
func (c *Cluster) unblockEvals() {
	for _, j := range c.jobs {
		for _, ev := range j.evals {
			if ev.Status == api.EvalStatusBlocked {
				c.process(j, ev, evalOpts{})
			}
		}
	}
}

// stopAlloc sets the allocation's desired status to stop; the client then kills it.
func (c *Cluster) stopAlloc(ar *allocRun, desc string, noShutdownDelay bool) {
	if ar.serverTerminal() {
		return
	}
	ar.a.DesiredStatus = api.AllocDesiredStatusStop
	ar.a.DesiredDescription = desc
	ar.releaseResources()
	ar.touchServer("AllocationUpdateDesiredStatus")
	ar.stop(noShutdownDelay)
	c.unblockSoon()
}

// placeAlloc creates an allocation of tg on node.
func (c *Cluster) placeAlloc(j *jobEntry, job *api.Job, tg *api.TaskGroup, name string, node *simNode, ev *api.Evaluation, prev *allocRun, dep *api.Deployment, canary bool, metric *api.AllocationMetric) *allocRun {
	i := c.bump(tAllocs)
	now := c.nowNano()
	a := &api.Allocation{
		ID: c.newID(), Namespace: j.key.ns, EvalID: ev.ID, Name: name, NodeID: node.n.ID, NodeName: node.n.Name,
		JobID: j.key.id, Job: job, TaskGroup: *tg.Name, DesiredStatus: api.AllocDesiredStatusRun,
		ClientStatus: api.AllocClientStatusPending, Metrics: metric,
		CreateIndex: i, ModifyIndex: i, AllocModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	ar := &allocRun{c: c, a: a, job: j.key, jobType: deref(job.Type), tg: tg, node: node, byName: map[string]*taskRun{}}
	ar.cpu, ar.mem = tgNeeds(tg)
	ar.holdsRes = true
	node.usedCPU += ar.cpu
	node.usedMem += ar.mem
	a.AllocatedResources = allocatedResources(tg)
	//lint:ignore SA1019 Nomad's server still sends the deprecated fields; clients read them.
	a.Resources, a.TaskResources = legacyResources(tg)
	a.NetworkStatus = &api.AllocNetworkStatus{}
	for _, t := range tg.Tasks {
		tr := &taskRun{ar: ar, t: t, kind: taskKind(t), script: readTaskScript(job, tg, t)}
		ar.tasks = append(ar.tasks, tr)
		ar.byName[t.Name] = tr
	}
	if dep != nil {
		a.DeploymentID = dep.ID
		if canary {
			a.DeploymentStatus = &api.AllocDeploymentStatus{Canary: true, ModifyIndex: i}
			st := dep.TaskGroups[*tg.Name]
			st.PlacedCanaries = append(st.PlacedCanaries, a.ID)
		}
		dep.TaskGroups[*tg.Name].PlacedAllocs++
		c.touchDeployment(dep)
	}
	if prev != nil {
		a.PreviousAllocation = prev.a.ID
		prev.a.NextAllocation = a.ID
		prev.touchServer("AllocationUpdated")
	}
	ar.srv = ar.snapshotClient()
	c.allocs[a.ID] = ar
	j.allocs[a.ID] = ar
	node.allocs[a.ID] = ar
	c.publishAlloc(ar, "PlanResult")
	// The client picks the allocation up a moment later.
	c.after(10*time.Millisecond, ar.receive)
	return ar
}

func allocatedResources(tg *api.TaskGroup) *api.AllocatedResources {
	ar := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{}, Shared: api.AllocatedSharedResources{}}
	if tg.EphemeralDisk != nil {
		ar.Shared.DiskMB = int64(deref(tg.EphemeralDisk.SizeMB))
	}
	for _, t := range tg.Tasks {
		r := &api.AllocatedTaskResources{}
		if t.Resources != nil {
			r.Cpu.CpuShares = int64(deref(t.Resources.CPU))
			r.Memory.MemoryMB = int64(deref(t.Resources.MemoryMB))
		}
		ar.Tasks[t.Name] = r
	}
	return ar
}

// groupAllocs returns the job's allocations of a group whose desired status is run.
func groupAllocs(j *jobEntry, tg string) []*allocRun {
	var out []*allocRun
	for _, ar := range j.allocs {
		if ar.a.TaskGroup == tg && !ar.serverTerminal() {
			out = append(out, ar)
		}
	}
	sortByName(out)
	return out
}

// jobChanged recomputes the job's status (Nomad's getJobStatus) and summary index.
func (c *Cluster) jobChanged(k jobKey) {
	j := c.jobs[k]
	if j == nil {
		return
	}
	job := j.current()
	status := jobPending
	hasAllocs, nonTerminal := false, false
	for _, ar := range j.allocs {
		hasAllocs = true
		if !ar.clientTerminal() {
			nonTerminal = true
			break
		}
	}
	pendingEval := false
	for _, ev := range j.evals {
		if ev.Status == api.EvalStatusPending || ev.Status == api.EvalStatusBlocked {
			pendingEval = true
		}
	}
	switch {
	case nonTerminal:
		status = jobRunning
	case deref(job.Stop):
		status = jobDead
	case job.IsPeriodic() || job.IsParameterized():
		status = jobRunning // Nomad's getJobStatus: they run until stopped, their launches aside
	case pendingEval:
		status = jobPending
	case hasAllocs && (deref(job.Type) == api.JobTypeBatch || deref(job.Type) == api.JobTypeSysbatch):
		status = jobDead
	case hasAllocs:
		status = jobDead
	}
	if deref(job.Status) != status {
		job.Status = ptr(status)
		i := c.bump(tJobs)
		job.ModifyIndex = ptr(i)
		j.modifyIndex = i
	}
}

// legacyResources fills the deprecated Resources and TaskResources fields Nomad still sends.
func legacyResources(tg *api.TaskGroup) (*api.Resources, map[string]*api.Resources) {
	total := &api.Resources{CPU: ptr(0), MemoryMB: ptr(0), DiskMB: ptr(0)}
	per := map[string]*api.Resources{}
	for _, t := range tg.Tasks {
		r := &api.Resources{CPU: ptr(0), MemoryMB: ptr(0)}
		if t.Resources != nil {
			r.CPU, r.MemoryMB, r.MemoryMaxMB = ptr(deref(t.Resources.CPU)), ptr(deref(t.Resources.MemoryMB)), t.Resources.MemoryMaxMB
		}
		*total.CPU += *r.CPU
		*total.MemoryMB += *r.MemoryMB
		per[t.Name] = r
	}
	if tg.EphemeralDisk != nil {
		total.DiskMB = ptr(deref(tg.EphemeralDisk.SizeMB))
	}
	return total, per
}
