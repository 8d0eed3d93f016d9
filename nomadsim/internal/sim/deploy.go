package sim

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// Deployments: created for a service job version with an update block, they track the
// health of the version's allocations (Nomad's deployment watcher and the client's alloc
// health watcher), honouring max_parallel, min_healthy_time, healthy_deadline and canaries.

// activeDeployment is the running (or paused) deployment for the job's current version.
func (c *Cluster) activeDeployment(j *JobEntry, job *api.Job) *api.Deployment {
	d := j.LatestDeployment()
	if d == nil || d.JobVersion != *job.Version || d.JobCreateIndex != *job.CreateIndex {
		return nil
	}
	if d.Status != api.DeploymentStatusRunning && d.Status != api.DeploymentStatusPaused {
		return nil
	}
	return d
}

// DeploymentActive is Nomad's Deployment.Active: the deployment is not over.
func DeploymentActive(d *api.Deployment) bool {
	switch d.Status {
	case api.DeploymentStatusRunning, api.DeploymentStatusPaused, api.DeploymentStatusBlocked,
		api.DeploymentStatusUnblocking, "initializing", api.DeploymentStatusPending:
		return true
	}
	return false
}

// createDeployment starts a deployment for the job's current version, cancelling an older
// one still running.
func (c *Cluster) createDeployment(j *JobEntry, job *api.Job) *api.Deployment {
	for _, old := range j.Deployments {
		if old.Status == api.DeploymentStatusRunning || old.Status == api.DeploymentStatusPaused {
			old.Status = api.DeploymentStatusCancelled
			old.StatusDescription = "Cancelled due to newer version of job"
			c.TouchDeployment(old)
		}
	}
	i := c.Bump(TableDeployments)
	now := c.Clock.Now()
	d := &api.Deployment{
		ID: c.newID(), Namespace: j.Key.Namespace, JobID: j.Key.ID, JobVersion: *job.Version,
		JobModifyIndex: Deref(job.ModifyIndex), JobSpecModifyIndex: Deref(job.JobModifyIndex),
		JobCreateIndex: Deref(job.CreateIndex), TaskGroups: map[string]*api.DeploymentState{},
		Status: api.DeploymentStatusRunning, StatusDescription: "Deployment is running",
		CreateIndex: i, ModifyIndex: i, CreateTime: now.UnixNano(), ModifyTime: now.UnixNano(),
	}
	for _, tg := range job.TaskGroups {
		u := tg.Update
		if u == nil {
			continue
		}
		st := &api.DeploymentState{
			AutoRevert:       Deref(u.AutoRevert),
			ProgressDeadline: Deref(u.ProgressDeadline), DesiredTotal: Deref(tg.Count),
		}
		if st.ProgressDeadline > 0 {
			st.RequireProgressBy = now.Add(st.ProgressDeadline)
		}
		d.TaskGroups[*tg.Name] = st
	}
	c.Deployments[d.ID] = d
	j.Deployments = append(j.Deployments, d)
	c.publishDeployment(d, "DeploymentStatusUpdate")
	c.armProgressDeadline(d)
	return d
}

// moveToDeployment is the deployment side of an in-place update: Nomad's scheduler gives
// the updated allocation the plan's deployment (none for a group without an update
// strategy) and, when that changes its deployment, clears its deployment status; the
// state store counts it as placed in the new deployment. The client, told of the update a
// moment later, drops the health it had set and watches it afresh (healthy deadline and
// min_healthy_time from then), so the allocation counts towards the new deployment once
// healthy again, as Nomad's alloc health hook does.
func (c *Cluster) moveToDeployment(ar *AllocRun, d *api.Deployment) {
	id := ""
	if d != nil {
		id = d.ID
	}
	if ar.Alloc.DeploymentID == id {
		return
	}
	ar.Alloc.DeploymentID = id
	ar.Alloc.DeploymentStatus = nil
	ar.healthGen++
	if d != nil {
		if st := d.TaskGroups[ar.Alloc.TaskGroup]; st != nil {
			st.PlacedAllocs++
			c.TouchDeployment(d)
		}
	}
	gen := ar.healthGen
	c.after(10*time.Millisecond, func() {
		if ar.healthGen != gen || !ar.watchesHealth() {
			return
		}
		ar.healthFrom = c.Clock.Now()
		ar.armHealthDeadline()
		ar.checkHealth()
	})
}

// armProgressDeadline fails the deployment when a group makes no progress (no allocation
// becomes healthy) before its progress deadline, as Nomad's deployment watcher does.
func (c *Cluster) armProgressDeadline(d *api.Deployment) {
	var next time.Time
	for _, st := range d.TaskGroups {
		if st.ProgressDeadline > 0 && (next.IsZero() || st.RequireProgressBy.Before(next)) {
			next = st.RequireProgressBy
		}
	}
	if next.IsZero() {
		return
	}
	c.after(next.Sub(c.Clock.Now()), func() {
		if d.Status != api.DeploymentStatusRunning {
			return
		}
		now := c.Clock.Now()
		for _, st := range d.TaskGroups {
			if st.ProgressDeadline > 0 && !st.RequireProgressBy.After(now) && st.HealthyAllocs < st.DesiredTotal {
				d.Status = api.DeploymentStatusFailed
				d.StatusDescription = "Failed due to progress deadline"
				c.TouchDeployment(d)
				if j := c.Jobs[JobKey{d.Namespace, d.JobID}]; j != nil && st.AutoRevert {
					c.autoRevert(j, d)
				}
				return
			}
		}
		c.armProgressDeadline(d)
	})
}

func (c *Cluster) TouchDeployment(d *api.Deployment) {
	i := c.Bump(TableDeployments)
	d.ModifyIndex = i
	d.ModifyTime = c.NowNano()
	c.publishDeployment(d, "DeploymentStatusUpdate")
}

// healthSettings are the group's health rules with Nomad's defaults.
func (ar *AllocRun) healthSettings() (minHealthy, deadline time.Duration, useChecks bool) {
	minHealthy, deadline, useChecks = 10*time.Second, 5*time.Minute, true
	if u := ar.Group.Update; u != nil {
		if u.MinHealthyTime != nil {
			minHealthy = *u.MinHealthyTime
		}
		if u.HealthyDeadline != nil {
			deadline = *u.HealthyDeadline
		}
		if u.HealthCheck != nil && *u.HealthCheck == healthCheckTaskStates {
			useChecks = false
		}
	}
	return
}

// watchesHealth reports whether the allocation's health is still to be decided.
func (ar *AllocRun) watchesHealth() bool {
	if ar.Alloc.DeploymentID == "" || !ar.Received || ar.Stopping {
		return false
	}
	return ar.Alloc.DeploymentStatus == nil || ar.Alloc.DeploymentStatus.Healthy == nil
}

// armHealthDeadline marks the allocation unhealthy if it is not healthy by the deadline.
func (ar *AllocRun) armHealthDeadline() {
	if !ar.watchesHealth() {
		return
	}
	_, deadline, _ := ar.healthSettings()
	gen := ar.healthGen
	ar.c.after(deadline, func() {
		if ar.healthGen == gen && ar.watchesHealth() {
			ar.setHealth(false)
		}
	})
}

// checkHealth decides the allocation's health as Nomad's client does: every task running
// (ephemeral tasks finished) and every healthiness check passing, continuously for
// min_healthy_time. It re-arms itself for the next moment the answer can change.
func (ar *AllocRun) checkHealth() {
	if !ar.watchesHealth() {
		return
	}
	now := ar.c.Clock.Now()
	minHealthy, _, useChecks := ar.healthSettings()
	since, up := ar.tasksUpSince()
	if !up {
		return
	}
	// A health watch restarted by an in-place update counts min_healthy_time from its own
	// start, as Nomad's client tracker does (it waits from the moment it sees the tasks and
	// checks up, not from when they started).
	if since.Before(ar.healthFrom) {
		since = ar.healthFrom
	}
	if useChecks {
		var next time.Time
		var passing bool
		since, next, passing = ar.checksPassingSince(now, since)
		if !passing {
			if !next.IsZero() {
				ar.rearmHealth(next)
			}
			return
		}
	}
	healthyAt := since.Add(minHealthy)
	if !healthyAt.After(now) {
		ar.setHealth(true)
		return
	}
	ar.rearmHealth(healthyAt)
}

// tasksUpSince reports whether every task that counts is up (running and not being killed;
// ephemeral ones finished successfully, or running poststart ones) and since when: the
// latest start of a running task.
func (ar *AllocRun) tasksUpSince() (since time.Time, up bool) {
	for _, tr := range ar.Tasks {
		switch {
		case tr.kind == kindPoststop:
			continue
		case tr.ephemeral():
			if tr.State.State == taskDead && !tr.State.Failed {
				continue
			}
			if tr.kind == kindPoststart && tr.State.State == TaskRunning {
				continue
			}
			return since, false
		}
		if tr.State.State != TaskRunning || tr.killing {
			return since, false
		}
		if tr.State.StartedAt.After(since) {
			since = tr.State.StartedAt
		}
	}
	return since, true
}

// checksPassingSince reports whether every healthiness check of the group's and the tasks'
// services passes at now, since moved to when the last of them started passing, and the
// next moment a check's answer changes (zero when none will).
func (ar *AllocRun) checksPassingSince(now, since time.Time) (time.Time, time.Time, bool) {
	var next time.Time
	ok := true
	visit := func(tr *taskRun, svc *api.Service) {
		for k := range svc.Checks {
			chk := &svc.Checks[k]
			if checkMode(chk) != "healthiness" {
				continue
			}
			start, up := ar.base(tr)
			if !up {
				ok = false
				continue
			}
			s := ar.scriptFor(tr, svc, chk)
			start = s.origin(start)
			el := now.Sub(start)
			ps, passing := s.passingSince(el)
			if nc, more := s.nextChange(el); more {
				if t := start.Add(nc); next.IsZero() || t.Before(next) {
					next = t
				}
			}
			if !passing {
				ok = false
				continue
			}
			if t := start.Add(ps); t.After(since) {
				since = t
			}
		}
	}
	ar.eachService(visit)
	return since, next, ok
}

func (ar *AllocRun) rearmHealth(at time.Time) {
	gen := ar.healthGen
	ar.c.after(at.Sub(ar.c.Clock.Now()), func() {
		if ar.healthGen == gen {
			ar.checkHealth()
		}
	})
}

// setHealth records the allocation's deployment health and lets the deployment progress.
func (ar *AllocRun) setHealth(healthy bool) {
	c := ar.c
	ar.healthGen++
	i := ar.bumpIndex()
	canary := ar.Alloc.DeploymentStatus != nil && ar.Alloc.DeploymentStatus.Canary
	ar.Alloc.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: Ptr(healthy), Timestamp: c.Clock.Now(), Canary: canary, ModifyIndex: i}
	c.publishAlloc(ar, "AllocationUpdated")
	d := c.Deployments[ar.Alloc.DeploymentID]
	if d == nil {
		return
	}
	st := d.TaskGroups[ar.Alloc.TaskGroup]
	if st == nil {
		return
	}
	if healthy {
		st.HealthyAllocs++
		if st.ProgressDeadline > 0 {
			st.RequireProgressBy = c.Clock.Now().Add(st.ProgressDeadline)
		}
	} else {
		st.UnhealthyAllocs++
	}
	c.TouchDeployment(d)
	c.DeploymentProgressSoon(d)
}

// DeploymentProgressSoon runs the deployment watcher once for a burst of health changes.
func (c *Cluster) DeploymentProgressSoon(d *api.Deployment) {
	if c.depPending[d.ID] {
		return
	}
	c.depPending[d.ID] = true
	c.after(0, func() {
		delete(c.depPending, d.ID)
		c.deploymentProgress(d)
	})
}

// deploymentProgress is the deployment watcher: it fails a deployment with unhealthy
// allocations, promotes canaries when allowed, continues a rolling update, and marks the
// deployment successful when every group is healthy.
func (c *Cluster) deploymentProgress(d *api.Deployment) {
	if d.Status != api.DeploymentStatusRunning {
		return
	}
	j := c.Jobs[JobKey{d.Namespace, d.JobID}]
	if j == nil {
		return
	}
	for _, st := range d.TaskGroups {
		if st.UnhealthyAllocs > 0 {
			d.Status = api.DeploymentStatusFailed
			d.StatusDescription = "Failed due to unhealthy allocations"
			c.TouchDeployment(d)
			if st.AutoRevert {
				c.autoRevert(j, d)
			}
			return
		}
	}
	done, work := true, false
	for name, st := range d.TaskGroups {
		if st.DesiredCanaries > 0 && !st.Promoted {
			healthyCanaries := 0
			for _, id := range st.PlacedCanaries {
				if ar := c.Allocs[id]; ar != nil && ar.Alloc.DeploymentStatus != nil && Deref(ar.Alloc.DeploymentStatus.Healthy) {
					healthyCanaries++
				}
			}
			if healthyCanaries >= st.DesiredCanaries && autoPromote(j, d, name) {
				st.Promoted = true
				c.TouchDeployment(d)
				work = true
			} else {
				done = false
				continue
			}
		}
		outdated := c.outdatedRemain(j, d, name)
		if st.HealthyAllocs < st.DesiredTotal || outdated {
			done = false
		}
		if outdated {
			work = true
		}
	}
	if done {
		d.Status = api.DeploymentStatusSuccessful
		d.StatusDescription = "Deployment completed successfully"
		c.TouchDeployment(d)
		if jv := j.VersionAt(d.JobVersion); jv != nil {
			jv.Stable = Ptr(true)
			c.Bump(TableJobs)
		}
		// Nomad's watcher evaluates the job on the health update that completed the
		// deployment too (the evaluation finds nothing to do).
		c.CreateEval(j, "deployment-watcher", EvalOpts{deploymentID: d.ID})
		return
	}
	if work {
		// Allocations left to replace: the scheduler continues the rolling update.
		c.CreateEval(j, "deployment-watcher", EvalOpts{deploymentID: d.ID})
	}
}

// outdatedRemain reports whether allocations of an older version still run in the group.
func (c *Cluster) outdatedRemain(j *JobEntry, d *api.Deployment, group string) bool {
	for _, ar := range j.Allocs {
		if ar.Alloc.TaskGroup == group && !ar.Terminal() && ar.Alloc.DeploymentID != d.ID {
			return true
		}
	}
	return false
}

// Promote promotes a deployment's canaries (all groups, or the named ones).
func (c *Cluster) Promote(d *api.Deployment, groups []string) error {
	if d.Status != api.DeploymentStatusRunning {
		return errDeploymentTerminal(d)
	}
	want := map[string]bool{}
	for _, g := range groups {
		want[g] = true
	}
	any := false
	for name, st := range d.TaskGroups {
		if len(want) > 0 && !want[name] {
			continue
		}
		if st.DesiredCanaries > 0 && !st.Promoted {
			st.Promoted = true
			any = true
		}
	}
	if !any {
		return ErrBadRequest("no canaries to promote")
	}
	d.StatusDescription = "Deployment is running"
	c.TouchDeployment(d)
	if j := c.Jobs[JobKey{d.Namespace, d.JobID}]; j != nil {
		c.CreateEval(j, "deployment-watcher", EvalOpts{deploymentID: d.ID})
	}
	return nil
}

// autoRevert registers the latest stable version again after a failed deployment.
func (c *Cluster) autoRevert(j *JobEntry, d *api.Deployment) {
	for k := len(j.Versions) - 1; k >= 0; k-- {
		v := j.Versions[k]
		if *v.Version != d.JobVersion && Deref(v.Stable) {
			d.StatusDescription = "Failed due to unhealthy allocations - rolling back to job version " + itoa(int(*v.Version))
			c.TouchDeployment(d)
			cp := CloneJob(v)
			_, _ = c.RegisterLocked(cp, "rollback")
			return
		}
	}
	d.StatusDescription = "Failed due to unhealthy allocations - no stable job version to auto revert to"
	c.TouchDeployment(d)
}

// autoPromote reads the group's auto_promote from the deployment's job version (the api's
// DeploymentState does not carry it).
func autoPromote(j *JobEntry, d *api.Deployment, group string) bool {
	jv := j.VersionAt(d.JobVersion)
	if jv == nil {
		return false
	}
	tg := FindGroup(jv, group)
	return tg != nil && tg.Update != nil && Deref(tg.Update.AutoPromote)
}
