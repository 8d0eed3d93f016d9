package sim

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
	DescMigrating   = "alloc is being migrated"
	descRescheduled = "alloc was rescheduled because it failed"
	descLost        = "alloc is lost since its node is down"
	descCanaryDone  = "alloc not needed as canary was promoted"
)

type EvalOpts struct {
	nodeID          string
	ForceReschedule bool
	deploymentID    string
}

// CreateEval records and processes an evaluation for the job. Callers hold c.Mu.
func (c *Cluster) CreateEval(j *JobEntry, trigger string, o EvalOpts) *api.Evaluation {
	job := j.Current()
	i := c.Bump(TableEvals)
	now := c.NowNano()
	ev := &api.Evaluation{
		ID: c.newID(), Priority: Deref(job.Priority), Type: Deref(job.Type), TriggeredBy: trigger,
		Namespace: j.Key.Namespace, JobID: j.Key.ID, JobModifyIndex: Deref(job.JobModifyIndex),
		NodeID: o.nodeID, DeploymentID: o.deploymentID, Status: api.EvalStatusPending,
		CreateIndex: i, ModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	c.Evals[ev.ID] = ev
	j.Evals = append(j.Evals, ev)
	c.publishEval(ev)
	c.process(j, ev, o)
	return ev
}

// process runs the scheduler for an evaluation and completes (or blocks) it.
func (c *Cluster) process(j *JobEntry, ev *api.Evaluation, o EvalOpts) {
	job := j.Current()
	ev.SnapshotIndex = c.Index.Current()
	plan := &evalPlan{ev: ev, failed: map[string]*api.AllocationMetric{}, queued: map[string]int{}, desired: map[string]*api.DesiredUpdates{}}
	switch Deref(job.Type) {
	case api.JobTypeSystem, api.JobTypeSysbatch:
		c.reconcileSystem(j, job, plan, o)
	default:
		c.reconcileGeneric(j, job, plan, o)
	}
	i := c.Bump(TableEvals)
	ev.ModifyIndex, ev.ModifyTime = i, c.NowNano()
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
	c.jobChanged(j.Key)
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
func (c *Cluster) blockEval(j *JobEntry, ev *api.Evaluation) {
	for _, other := range j.Evals {
		if other.Status == api.EvalStatusBlocked {
			// One blocked evaluation per job: the new one supersedes the old.
			other.Status = api.EvalStatusCancelled
			other.StatusDescription = "evaluation superseded"
			other.ModifyIndex = c.Bump(TableEvals)
			c.publishEval(other)
		}
	}
	i := c.Bump(TableEvals)
	now := c.NowNano()
	b := &api.Evaluation{
		ID: c.newID(), Priority: ev.Priority, Type: ev.Type, TriggeredBy: "queued-allocs",
		Namespace: ev.Namespace, JobID: ev.JobID, JobModifyIndex: ev.JobModifyIndex,
		Status: api.EvalStatusBlocked, StatusDescription: "created to place remaining allocations",
		PreviousEval: ev.ID, FailedTGAllocs: ev.FailedTGAllocs, SnapshotIndex: ev.SnapshotIndex,
		ClassEligibility: map[string]bool{}, CreateIndex: i, ModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	ev.BlockedEval = b.ID
	c.Evals[b.ID] = b
	j.Evals = append(j.Evals, b)
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

// unblockEvals reprocesses every blocked evaluation. Callers hold c.Mu.
func (c *Cluster) unblockEvals() {
	for _, j := range c.Jobs {
		for _, ev := range j.Evals {
			if ev.Status == api.EvalStatusBlocked {
				c.process(j, ev, EvalOpts{})
			}
		}
	}
}

// StopAlloc sets the allocation's desired status to stop; the client then kills it.
func (c *Cluster) StopAlloc(ar *AllocRun, desc string, noShutdownDelay bool) {
	if ar.ServerTerminal() {
		return
	}
	ar.Alloc.DesiredStatus = api.AllocDesiredStatusStop
	ar.Alloc.DesiredDescription = desc
	ar.releaseResources()
	ar.TouchServer("AllocationUpdateDesiredStatus")
	ar.stop(noShutdownDelay)
	c.unblockSoon()
}

// placeAlloc creates an allocation of tg on node.
func (c *Cluster) placeAlloc(j *JobEntry, job *api.Job, tg *api.TaskGroup, name string, node *simNode, ev *api.Evaluation, prev *AllocRun, dep *api.Deployment, canary bool, metric *api.AllocationMetric) *AllocRun {
	i := c.Bump(TableAllocs)
	now := c.NowNano()
	a := &api.Allocation{
		ID: c.newID(), Namespace: j.Key.Namespace, EvalID: ev.ID, Name: name, NodeID: node.Node.ID, NodeName: node.Node.Name,
		JobID: j.Key.ID, Job: job, TaskGroup: *tg.Name, DesiredStatus: api.AllocDesiredStatusRun,
		ClientStatus: api.AllocClientStatusPending, Metrics: metric,
		CreateIndex: i, ModifyIndex: i, AllocModifyIndex: i, CreateTime: now, ModifyTime: now,
	}
	ar := &AllocRun{c: c, Alloc: a, Job: j.Key, JobType: Deref(job.Type), Group: tg, Node: node, TasksByName: map[string]*taskRun{}}
	ar.cpu, ar.mem = tgNeeds(tg)
	ar.holdsRes = true
	node.usedCPU += ar.cpu
	node.usedMem += ar.mem
	a.AllocatedResources = allocatedResources(tg)
	//lint:ignore SA1019 Nomad's server still sends the deprecated fields; clients read them.
	a.Resources, a.TaskResources = legacyResources(tg)
	a.NetworkStatus = &api.AllocNetworkStatus{}
	for _, t := range tg.Tasks {
		tr := &taskRun{ar: ar, Task: t, kind: taskKind(t), script: readTaskScript(job, tg, t)}
		ar.Tasks = append(ar.Tasks, tr)
		ar.TasksByName[t.Name] = tr
	}
	if dep != nil {
		a.DeploymentID = dep.ID
		if canary {
			a.DeploymentStatus = &api.AllocDeploymentStatus{Canary: true, ModifyIndex: i}
			st := dep.TaskGroups[*tg.Name]
			st.PlacedCanaries = append(st.PlacedCanaries, a.ID)
		}
		dep.TaskGroups[*tg.Name].PlacedAllocs++
		c.TouchDeployment(dep)
	}
	if prev != nil {
		a.PreviousAllocation = prev.Alloc.ID
		prev.Alloc.NextAllocation = a.ID
		prev.TouchServer("AllocationUpdated")
	}
	ar.srv = ar.snapshotClient()
	c.Allocs[a.ID] = ar
	j.Allocs[a.ID] = ar
	node.Allocs[a.ID] = ar
	c.publishAlloc(ar, "PlanResult")
	// The client picks the allocation up a moment later.
	c.after(10*time.Millisecond, ar.receive)
	return ar
}

func allocatedResources(tg *api.TaskGroup) *api.AllocatedResources {
	ar := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{}, Shared: api.AllocatedSharedResources{}}
	if tg.EphemeralDisk != nil {
		ar.Shared.DiskMB = int64(Deref(tg.EphemeralDisk.SizeMB))
	}
	for _, t := range tg.Tasks {
		r := &api.AllocatedTaskResources{}
		if t.Resources != nil {
			r.Cpu.CpuShares = int64(Deref(t.Resources.CPU))
			r.Memory.MemoryMB = int64(Deref(t.Resources.MemoryMB))
		}
		ar.Tasks[t.Name] = r
	}
	return ar
}

// GroupAllocs returns the job's allocations of a group whose desired status is run.
func GroupAllocs(j *JobEntry, tg string) []*AllocRun {
	var out []*AllocRun
	for _, ar := range j.Allocs {
		if ar.Alloc.TaskGroup == tg && !ar.ServerTerminal() {
			out = append(out, ar)
		}
	}
	sortByName(out)
	return out
}

// jobChanged recomputes the job's status (Nomad's getJobStatus) and summary index.
func (c *Cluster) jobChanged(k JobKey) {
	j := c.Jobs[k]
	if j == nil {
		return
	}
	job := j.Current()
	status := jobPending
	hasAllocs, nonTerminal := false, false
	for _, ar := range j.Allocs {
		hasAllocs = true
		if !ar.ClientTerminal() {
			nonTerminal = true
			break
		}
	}
	pendingEval := false
	for _, ev := range j.Evals {
		if ev.Status == api.EvalStatusPending || ev.Status == api.EvalStatusBlocked {
			pendingEval = true
		}
	}
	switch {
	case nonTerminal:
		status = jobRunning
	case Deref(job.Stop):
		status = jobDead
	case job.IsPeriodic() || job.IsParameterized():
		status = jobRunning // Nomad's getJobStatus: they run until stopped, their launches aside
	case pendingEval:
		status = jobPending
	case hasAllocs && (Deref(job.Type) == api.JobTypeBatch || Deref(job.Type) == api.JobTypeSysbatch):
		status = jobDead
	case hasAllocs:
		status = jobDead
	}
	if Deref(job.Status) != status {
		job.Status = Ptr(status)
		i := c.Bump(TableJobs)
		job.ModifyIndex = Ptr(i)
		j.modifyIndex = i
	}
}

// legacyResources fills the deprecated Resources and TaskResources fields Nomad still sends.
func legacyResources(tg *api.TaskGroup) (*api.Resources, map[string]*api.Resources) {
	total := &api.Resources{CPU: Ptr(0), MemoryMB: Ptr(0), DiskMB: Ptr(0)}
	per := map[string]*api.Resources{}
	for _, t := range tg.Tasks {
		r := &api.Resources{CPU: Ptr(0), MemoryMB: Ptr(0)}
		if t.Resources != nil {
			r.CPU, r.MemoryMB, r.MemoryMaxMB = Ptr(Deref(t.Resources.CPU)), Ptr(Deref(t.Resources.MemoryMB)), t.Resources.MemoryMaxMB
		}
		*total.CPU += *r.CPU
		*total.MemoryMB += *r.MemoryMB
		per[t.Name] = r
	}
	if tg.EphemeralDisk != nil {
		total.DiskMB = Ptr(Deref(tg.EphemeralDisk.SizeMB))
	}
	return total, per
}
