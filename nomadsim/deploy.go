package nomadsim

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// Deployments: created for a service job version with an update block, they track the
// health of the version's allocations (Nomad's deployment watcher and the client's alloc
// health watcher), honouring max_parallel, min_healthy_time, healthy_deadline and canaries.

// activeDeployment is the running (or paused) deployment for the job's current version.
func (c *Cluster) activeDeployment(j *jobEntry, job *api.Job) *api.Deployment {
	d := j.latestDeployment()
	if d == nil || d.JobVersion != *job.Version || d.JobCreateIndex != *job.CreateIndex {
		return nil
	}
	if d.Status != api.DeploymentStatusRunning && d.Status != api.DeploymentStatusPaused {
		return nil
	}
	return d
}

// deploymentActive is Nomad's Deployment.Active: the deployment is not over.
func deploymentActive(d *api.Deployment) bool {
	switch d.Status {
	case api.DeploymentStatusRunning, api.DeploymentStatusPaused, api.DeploymentStatusBlocked,
		api.DeploymentStatusUnblocking, "initializing", api.DeploymentStatusPending:
		return true
	}
	return false
}

// createDeployment starts a deployment for the job's current version, cancelling an older
// one still running.
func (c *Cluster) createDeployment(j *jobEntry, job *api.Job) *api.Deployment {
	for _, old := range j.deployments {
		if old.Status == api.DeploymentStatusRunning || old.Status == api.DeploymentStatusPaused {
			old.Status = api.DeploymentStatusCancelled
			old.StatusDescription = "Cancelled due to newer version of job"
			c.touchDeployment(old)
		}
	}
	i := c.bump(tDeployments)
	now := c.clk.now()
	d := &api.Deployment{
		ID: c.newID(), Namespace: j.key.ns, JobID: j.key.id, JobVersion: *job.Version,
		JobModifyIndex: deref(job.ModifyIndex), JobSpecModifyIndex: deref(job.JobModifyIndex),
		JobCreateIndex: deref(job.CreateIndex), TaskGroups: map[string]*api.DeploymentState{},
		Status: api.DeploymentStatusRunning, StatusDescription: "Deployment is running",
		CreateIndex: i, ModifyIndex: i, CreateTime: now.UnixNano(), ModifyTime: now.UnixNano(),
	}
	for _, tg := range job.TaskGroups {
		u := tg.Update
		if u == nil {
			continue
		}
		st := &api.DeploymentState{
			AutoRevert:       deref(u.AutoRevert),
			ProgressDeadline: deref(u.ProgressDeadline), DesiredTotal: deref(tg.Count),
		}
		if st.ProgressDeadline > 0 {
			st.RequireProgressBy = now.Add(st.ProgressDeadline)
		}
		d.TaskGroups[*tg.Name] = st
	}
	c.deployments[d.ID] = d
	j.deployments = append(j.deployments, d)
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
func (c *Cluster) moveToDeployment(ar *allocRun, d *api.Deployment) {
	id := ""
	if d != nil {
		id = d.ID
	}
	if ar.a.DeploymentID == id {
		return
	}
	ar.a.DeploymentID = id
	ar.a.DeploymentStatus = nil
	ar.healthGen++
	if d != nil {
		if st := d.TaskGroups[ar.a.TaskGroup]; st != nil {
			st.PlacedAllocs++
			c.touchDeployment(d)
		}
	}
	gen := ar.healthGen
	c.after(10*time.Millisecond, func() {
		if ar.healthGen != gen || !ar.watchesHealth() {
			return
		}
		ar.healthFrom = c.clk.now()
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
	c.after(next.Sub(c.clk.now()), func() {
		if d.Status != api.DeploymentStatusRunning {
			return
		}
		now := c.clk.now()
		for _, st := range d.TaskGroups {
			if st.ProgressDeadline > 0 && !st.RequireProgressBy.After(now) && st.HealthyAllocs < st.DesiredTotal {
				d.Status = api.DeploymentStatusFailed
				d.StatusDescription = "Failed due to progress deadline"
				c.touchDeployment(d)
				if j := c.jobs[jobKey{d.Namespace, d.JobID}]; j != nil && st.AutoRevert {
					c.autoRevert(j, d)
				}
				return
			}
		}
		c.armProgressDeadline(d)
	})
}

func (c *Cluster) touchDeployment(d *api.Deployment) {
	i := c.bump(tDeployments)
	d.ModifyIndex = i
	d.ModifyTime = c.nowNano()
	c.publishDeployment(d, "DeploymentStatusUpdate")
}

// healthSettings are the group's health rules with Nomad's defaults.
func (ar *allocRun) healthSettings() (minHealthy, deadline time.Duration, useChecks bool) {
	minHealthy, deadline, useChecks = 10*time.Second, 5*time.Minute, true
	if u := ar.tg.Update; u != nil {
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
func (ar *allocRun) watchesHealth() bool {
	if ar.a.DeploymentID == "" || !ar.received || ar.stopping {
		return false
	}
	return ar.a.DeploymentStatus == nil || ar.a.DeploymentStatus.Healthy == nil
}

// armHealthDeadline marks the allocation unhealthy if it is not healthy by the deadline.
func (ar *allocRun) armHealthDeadline() {
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
func (ar *allocRun) checkHealth() {
	if !ar.watchesHealth() {
		return
	}
	now := ar.c.clk.now()
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
func (ar *allocRun) tasksUpSince() (since time.Time, up bool) {
	for _, tr := range ar.tasks {
		switch {
		case tr.kind == kindPoststop:
			continue
		case tr.ephemeral():
			if tr.st.State == taskDead && !tr.st.Failed {
				continue
			}
			if tr.kind == kindPoststart && tr.st.State == taskRunning {
				continue
			}
			return since, false
		}
		if tr.st.State != taskRunning || tr.killing {
			return since, false
		}
		if tr.st.StartedAt.After(since) {
			since = tr.st.StartedAt
		}
	}
	return since, true
}

// checksPassingSince reports whether every healthiness check of the group's and the tasks'
// services passes at now, since moved to when the last of them started passing, and the
// next moment a check's answer changes (zero when none will).
func (ar *allocRun) checksPassingSince(now, since time.Time) (time.Time, time.Time, bool) {
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
	for _, svc := range ar.tg.Services {
		visit(nil, svc)
	}
	for _, tr := range ar.tasks {
		for _, svc := range tr.t.Services {
			visit(tr, svc)
		}
	}
	return since, next, ok
}

func (ar *allocRun) rearmHealth(at time.Time) {
	gen := ar.healthGen
	ar.c.after(at.Sub(ar.c.clk.now()), func() {
		if ar.healthGen == gen {
			ar.checkHealth()
		}
	})
}

// setHealth records the allocation's deployment health and lets the deployment progress.
func (ar *allocRun) setHealth(healthy bool) {
	c := ar.c
	ar.healthGen++
	i := ar.bumpIndex()
	canary := ar.a.DeploymentStatus != nil && ar.a.DeploymentStatus.Canary
	ar.a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: ptr(healthy), Timestamp: c.clk.now(), Canary: canary, ModifyIndex: i}
	c.publishAlloc(ar, "AllocationUpdated")
	d := c.deployments[ar.a.DeploymentID]
	if d == nil {
		return
	}
	st := d.TaskGroups[ar.a.TaskGroup]
	if st == nil {
		return
	}
	if healthy {
		st.HealthyAllocs++
		if st.ProgressDeadline > 0 {
			st.RequireProgressBy = c.clk.now().Add(st.ProgressDeadline)
		}
	} else {
		st.UnhealthyAllocs++
	}
	c.touchDeployment(d)
	c.deploymentProgressSoon(d)
}

// deploymentProgressSoon runs the deployment watcher once for a burst of health changes.
func (c *Cluster) deploymentProgressSoon(d *api.Deployment) {
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
	j := c.jobs[jobKey{d.Namespace, d.JobID}]
	if j == nil {
		return
	}
	for _, st := range d.TaskGroups {
		if st.UnhealthyAllocs > 0 {
			d.Status = api.DeploymentStatusFailed
			d.StatusDescription = "Failed due to unhealthy allocations"
			c.touchDeployment(d)
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
				if ar := c.allocs[id]; ar != nil && ar.a.DeploymentStatus != nil && deref(ar.a.DeploymentStatus.Healthy) {
					healthyCanaries++
				}
			}
			if healthyCanaries >= st.DesiredCanaries && autoPromote(j, d, name) {
				st.Promoted = true
				c.touchDeployment(d)
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
		c.touchDeployment(d)
		if jv := j.version(d.JobVersion); jv != nil {
			jv.Stable = ptr(true)
			c.bump(tJobs)
		}
		// Nomad's watcher evaluates the job on the health update that completed the
		// deployment too (the evaluation finds nothing to do).
		c.createEval(j, "deployment-watcher", evalOpts{deploymentID: d.ID})
		return
	}
	if work {
		// Allocations left to replace: the scheduler continues the rolling update.
		c.createEval(j, "deployment-watcher", evalOpts{deploymentID: d.ID})
	}
}

// outdatedRemain reports whether allocations of an older version still run in the group.
func (c *Cluster) outdatedRemain(j *jobEntry, d *api.Deployment, group string) bool {
	for _, ar := range j.allocs {
		if ar.a.TaskGroup == group && !ar.terminal() && ar.a.DeploymentID != d.ID {
			return true
		}
	}
	return false
}

// promote promotes a deployment's canaries (all groups, or the named ones).
func (c *Cluster) promote(d *api.Deployment, groups []string) error {
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
		return errBadRequest("no canaries to promote")
	}
	d.StatusDescription = "Deployment is running"
	c.touchDeployment(d)
	if j := c.jobs[jobKey{d.Namespace, d.JobID}]; j != nil {
		c.createEval(j, "deployment-watcher", evalOpts{deploymentID: d.ID})
	}
	return nil
}

// autoRevert registers the latest stable version again after a failed deployment.
func (c *Cluster) autoRevert(j *jobEntry, d *api.Deployment) {
	for k := len(j.versions) - 1; k >= 0; k-- {
		v := j.versions[k]
		if *v.Version != d.JobVersion && deref(v.Stable) {
			d.StatusDescription = "Failed due to unhealthy allocations - rolling back to job version " + itoa(int(*v.Version))
			c.touchDeployment(d)
			cp := cloneJob(v)
			_, _ = c.registerLocked(cp, "rollback")
			return
		}
	}
	d.StatusDescription = "Failed due to unhealthy allocations - no stable job version to auto revert to"
	c.touchDeployment(d)
}

// autoPromote reads the group's auto_promote from the deployment's job version (the api's
// DeploymentState does not carry it).
func autoPromote(j *jobEntry, d *api.Deployment, group string) bool {
	jv := j.version(d.JobVersion)
	if jv == nil {
		return false
	}
	tg := findGroup(jv, group)
	return tg != nil && tg.Update != nil && deref(tg.Update.AutoPromote)
}
