package nomadsim

import (
	"github.com/hashicorp/nomad/api"
)

// reconcileGeneric is the service and batch scheduler.
func (c *Cluster) reconcileGeneric(j *jobEntry, job *api.Job, plan *evalPlan, o evalOpts) {
	groups := map[string]bool{}
	for _, tg := range job.TaskGroups {
		groups[*tg.Name] = true
	}
	// Groups no longer in the job, or a stopped job: stop everything.
	for _, ar := range j.allocs {
		if ar.serverTerminal() {
			continue
		}
		if deref(job.Stop) || !groups[ar.a.TaskGroup] {
			c.stopAlloc(ar, descNotNeeded, false)
			plan.du(ar.a.TaskGroup).Stop++
		}
	}
	if deref(job.Stop) {
		return
	}
	for _, tg := range job.TaskGroups {
		c.reconcileGroup(j, job, tg, plan, o)
	}
}

// placement is one allocation to place.
type placement struct {
	name   string
	prev   *allocRun
	canary bool
	inDep  bool
	resch  bool
}

func (c *Cluster) reconcileGroup(j *jobEntry, job *api.Job, tg *api.TaskGroup, plan *evalPlan, o evalOpts) {
	name := *tg.Name
	du := plan.du(name)
	plan.queued[name] = 0
	count := deref(tg.Count)
	now := c.clk.now()
	var places []placement
	var occupying []*allocRun
	for _, ar := range groupAllocs(j, name) {
		switch {
		case ar.a.ClientStatus == api.AllocClientStatusLost:
			c.stopAlloc(ar, descLost, false)
			du.Stop++
			if ar.a.NextAllocation == "" {
				places = append(places, placement{name: ar.a.Name, prev: ar})
				du.Migrate++
			}
		case ar.a.DesiredTransition.Migrate != nil && *ar.a.DesiredTransition.Migrate:
			c.stopAlloc(ar, descMigrating, deref(ar.a.DesiredTransition.NoShutdownDelay))
			du.Migrate++
			places = append(places, placement{name: ar.a.Name, prev: ar})
		case ar.a.ClientStatus == api.AllocClientStatusFailed && ar.a.NextAllocation == "":
			when, ok := c.rescheduleTime(ar, now)
			if ok && (o.forceReschedule || !when.After(now) || deref(ar.a.DesiredTransition.ForceReschedule)) {
				c.stopAlloc(ar, descRescheduled, false)
				du.RescheduleNow++
				places = append(places, placement{name: ar.a.Name, prev: ar, resch: true})
				continue
			}
			if ok && ar.a.FollowupEvalID == "" {
				du.RescheduleLater++
				c.scheduleFollowup(j, ar, when)
			}
			occupying = append(occupying, ar)
		default:
			occupying = append(occupying, ar)
		}
	}

	// Versions: outdated allocations are updated in place or destructively.
	cur := *job.Version
	var current, old, inplace []*allocRun
	for _, ar := range occupying {
		if ar.a.Job == nil || *ar.a.Job.Version == cur {
			current = append(current, ar)
			continue
		}
		if ar.clientTerminal() {
			// Terminal batch work keeps its version.
			current = append(current, ar)
			continue
		}
		if !destructiveChange(ar.a.Job, job, name) {
			// Updated in place below, once the count has stopped what it does not
			// need (Nomad stops before it updates: a stopped allocation keeps its version).
			inplace = append(inplace, ar)
			current = append(current, ar)
			continue
		}
		old = append(old, ar)
	}

	upd := tg.Update
	rolling := deref(job.Type) == api.JobTypeService && upd != nil && deref(upd.MaxParallel) > 0
	var dep *api.Deployment
	if rolling {
		dep = c.activeDeployment(j, job)
	}
	getDep := func() *api.Deployment {
		if !rolling {
			return nil
		}
		if dep == nil {
			dep = c.createDeployment(j, job)
		}
		// The evaluation names the deployment its plan created or advanced.
		plan.ev.DeploymentID = dep.ID
		return dep
	}

	switch {
	case len(old) > 0 && !rolling:
		// No update strategy: every outdated allocation is replaced at once.
		for _, ar := range old {
			c.stopAlloc(ar, descUpdating, false)
			du.DestructiveUpdate++
			places = append(places, placement{name: ar.a.Name, prev: ar})
		}
		old = nil
	case len(old) > 0:
		d := getDep()
		st := d.TaskGroups[name]
		canaries := deref(upd.Canary)
		if canaries > 0 && !st.Promoted {
			// Canaries are wanted only when a destructive change meets running
			// allocations (never on a first deployment).
			if st.DesiredCanaries != canaries {
				st.DesiredCanaries = canaries
				if !deref(upd.AutoPromote) {
					d.StatusDescription = "Deployment is running but requires manual promotion"
				}
				c.touchDeployment(d)
			}
			placed := 0
			for _, ar := range current {
				if ar.a.DeploymentID == d.ID && ar.a.DeploymentStatus != nil && ar.a.DeploymentStatus.Canary {
					placed++
				}
			}
			sortByName(old)
			for k := placed; k < canaries && k < len(old); k++ {
				places = append(places, placement{name: old[k].a.Name, canary: true, inDep: true})
				du.Canary++
			}
			du.Ignore += uint64(len(old))
			// During the canary phase the old allocations stay and count stays met.
			current = append(current, old...)
			old = nil
			break
		}
		// Promoted canaries replace the old allocations of the same names.
		canaryNames := map[string]bool{}
		inflight := 0
		for _, ar := range current {
			if ar.a.DeploymentID != d.ID {
				continue
			}
			if ar.a.DeploymentStatus != nil && ar.a.DeploymentStatus.Canary {
				canaryNames[ar.a.Name] = true
			}
			if ar.a.DeploymentStatus == nil || ar.a.DeploymentStatus.Healthy == nil {
				inflight++
			}
		}
		var rest []*allocRun
		for _, ar := range old {
			if canaryNames[ar.a.Name] {
				c.stopAlloc(ar, descCanaryDone, false)
				du.Stop++
				continue
			}
			rest = append(rest, ar)
		}
		limit := deref(upd.MaxParallel) - inflight
		sortByName(rest)
		var keep []*allocRun
		for _, ar := range rest {
			if limit > 0 {
				limit--
				c.stopAlloc(ar, descUpdating, false)
				du.DestructiveUpdate++
				places = append(places, placement{name: ar.a.Name, prev: ar, inDep: true})
				continue
			}
			keep = append(keep, ar)
			du.Ignore++
		}
		old = keep
	}

	// Count: place what is missing, stop what is extra.
	live := len(current) + len(old) + len(places)
	for _, p := range places {
		if p.canary {
			live--
		}
	}
	if live > count {
		extra := live - count
		all := append(append([]*allocRun{}, old...), current...)
		// Stop the highest name indexes first, as Nomad does when scaling down.
		sortByName(all)
		for k := len(all) - 1; k >= 0 && extra > 0; k-- {
			c.stopAlloc(all[k], descNotNeeded, false)
			du.Stop++
			extra--
		}
	}
	if live < count {
		used := map[string]bool{}
		for _, ar := range append(append([]*allocRun{}, current...), old...) {
			used[ar.a.Name] = true
		}
		for _, p := range places {
			used[p.name] = true
		}
		// Allocations stopped for a migration, a lost node or a reschedule whose
		// replacement could not be placed then are replaced first, linked to them.
		for _, orphan := range orphans(j, name) {
			if live >= count || used[orphan.a.Name] {
				continue
			}
			used[orphan.a.Name] = true
			places = append(places, placement{name: orphan.a.Name, prev: orphan, resch: orphan.a.DesiredDescription == descRescheduled})
			live++
		}
		for k := 0; live < count; k++ {
			n := allocName(j.key.id, name, k)
			if used[n] {
				continue
			}
			used[n] = true
			places = append(places, placement{name: n, inDep: true})
			live++
		}
	}
	updated := c.updateInPlace(inplace, job, tg, plan, rolling, getDep)
	if len(places) == 0 {
		for _, ar := range current {
			if !ar.serverTerminal() && !updated[ar] {
				du.Ignore++
			}
		}
		return
	}
	p := c.newPlacer(j, job, tg)
	failedN := 0
	for _, pl := range places {
		avoid := ""
		if pl.resch && pl.prev != nil {
			avoid = pl.prev.node.n.ID
		}
		n := p.pick(avoid)
		if n == nil {
			failedN++
			continue
		}
		var d *api.Deployment
		if pl.inDep || pl.canary {
			d = getDep()
		}
		ar := c.placeAlloc(j, job, tg, pl.name, n, plan.ev, pl.prev, d, pl.canary, p.metric)
		if pl.resch && pl.prev != nil {
			ar.a.RescheduleTracker = rescheduleTracker(pl.prev, c.clk.now())
		}
		if !pl.canary && pl.prev == nil {
			du.Place++
		}
	}
	if failedN > 0 {
		m := *p.metric
		m.CoalescedFailures = failedN - 1
		plan.failed[name] = &m
		plan.queued[name] = failedN
	} else {
		plan.queued[name] = 0
	}
}

// updateInPlace applies the in-place updates of the allocations the count kept: each
// carries the new job version and the evaluation that made it, and joins the plan's
// deployment (a group with an update strategy makes one for the new version, as Nomad's
// reconciler does for any in-place update), leaving any older one.
func (c *Cluster) updateInPlace(inplace []*allocRun, job *api.Job, tg *api.TaskGroup, plan *evalPlan, rolling bool, getDep func() *api.Deployment) map[*allocRun]bool {
	updated := map[*allocRun]bool{}
	for _, ar := range inplace {
		if ar.serverTerminal() {
			continue
		}
		ar.a.EvalID = plan.ev.ID
		ar.a.Job = job
		ar.tg = tg
		ar.jobType = deref(job.Type)
		var d *api.Deployment
		if rolling {
			d = getDep()
		}
		c.moveToDeployment(ar, d)
		ar.touchServer("AllocationUpdated")
		plan.du(*tg.Name).InPlaceUpdate++
		updated[ar] = true
	}
	return updated
}

// orphans are a group's allocations stopped to be replaced (migrated, lost, rescheduled)
// whose replacement was never placed.
func orphans(j *jobEntry, group string) []*allocRun {
	var out []*allocRun
	for _, ar := range j.allocs {
		if ar.a.TaskGroup != group || !ar.serverTerminal() || ar.a.NextAllocation != "" {
			continue
		}
		switch ar.a.DesiredDescription {
		case descMigrating, descLost, descRescheduled:
			out = append(out, ar)
		}
	}
	sortByName(out)
	return out
}

// destructiveChange reports whether moving an allocation from job version a to b needs a
// new allocation: anything in the group but its count, update, scaling, reschedule and
// restart blocks, or the job's meta, changed.
func destructiveChange(a, b *api.Job, group string) bool {
	ta, tb := findGroup(a, group), findGroup(b, group)
	if ta == nil || tb == nil {
		return true
	}
	if !equalJSON(a.Meta, b.Meta) || !equalJSON(a.Datacenters, b.Datacenters) || !equalJSON(a.Constraints, b.Constraints) {
		return true
	}
	ca, cb := *ta, *tb
	ca.Count, cb.Count = nil, nil
	ca.Update, cb.Update = nil, nil
	ca.Scaling, cb.Scaling = nil, nil
	ca.ReschedulePolicy, cb.ReschedulePolicy = nil, nil
	ca.RestartPolicy, cb.RestartPolicy = nil, nil
	return !equalJSON(ca, cb)
}

func findGroup(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if *tg.Name == name {
			return tg
		}
	}
	return nil
}

// reconcileSystem is the system and sysbatch scheduler: one allocation per feasible node.
// An allocation stopped by the user is not replaced until an evaluation that is not the
// stop's own runs (Nomad's system scheduler needs a fresh evaluation, issue 19043).
func (c *Cluster) reconcileSystem(j *jobEntry, job *api.Job, plan *evalPlan, o evalOpts) {
	groups := map[string]*api.TaskGroup{}
	for _, tg := range job.TaskGroups {
		groups[*tg.Name] = tg
	}
	for _, ar := range j.allocs {
		if ar.serverTerminal() {
			continue
		}
		if deref(job.Stop) || groups[ar.a.TaskGroup] == nil {
			c.stopAlloc(ar, descNotNeeded, false)
			plan.du(ar.a.TaskGroup).Stop++
		}
	}
	if deref(job.Stop) {
		return
	}
	for _, tg := range job.TaskGroups {
		name := *tg.Name
		du := plan.du(name)
		onNode := map[string]*allocRun{}
		for _, ar := range groupAllocs(j, name) {
			if ar.a.DesiredTransition.Migrate != nil && *ar.a.DesiredTransition.Migrate {
				c.stopAlloc(ar, descMigrating, deref(ar.a.DesiredTransition.NoShutdownDelay))
				du.Stop++
				continue
			}
			if ar.a.ClientStatus == api.AllocClientStatusLost {
				c.stopAlloc(ar, descLost, false)
				du.Stop++
				continue
			}
			if ar.a.Job != nil && *ar.a.Job.Version != *job.Version && !ar.clientTerminal() {
				if destructiveChange(ar.a.Job, job, name) {
					c.stopAlloc(ar, descUpdating, false)
					du.DestructiveUpdate++
					continue
				}
				ar.a.Job, ar.tg = job, tg
				ar.touchServer("AllocationUpdated")
				du.InPlaceUpdate++
			}
			onNode[ar.node.n.ID] = ar
		}
		if plan.ev.TriggeredBy == "alloc-stop" {
			continue
		}
		p := c.newPlacer(j, job, tg)
		failedN := 0
		for _, n := range p.feasible {
			if onNode[n.n.ID] != nil {
				du.Ignore++
				continue
			}
			if deref(job.Type) == api.JobTypeSysbatch && c.sysbatchDone(j, name, n.n.ID, *job.Version) {
				continue
			}
			if n.usedCPU+p.cpu > nodeCPU || n.usedMem+p.mem > nodeMemory {
				failedN++
				continue
			}
			var prev *allocRun
			for _, ar := range j.allocs {
				if ar.a.TaskGroup == name && ar.node == n && ar.a.NextAllocation == "" && ar.serverTerminal() && ar.a.DesiredDescription != descNotNeeded {
					prev = ar
				}
			}
			c.placeAlloc(j, job, tg, allocName(j.key.id, name, 0), n, plan.ev, prev, nil, false, p.metric)
			du.Place++
		}
		plan.queued[name] = failedN
		if failedN > 0 {
			m := *p.metric
			m.CoalescedFailures = failedN - 1
			plan.failed[name] = &m
		}
	}
}

// sysbatchDone reports whether a sysbatch group already completed on a node at a version.
func (c *Cluster) sysbatchDone(j *jobEntry, group, nodeID string, version uint64) bool {
	for _, ar := range j.allocs {
		if ar.a.TaskGroup == group && ar.node.n.ID == nodeID && ar.a.ClientStatus == api.AllocClientStatusComplete && ar.a.Job != nil && *ar.a.Job.Version == version {
			return true
		}
	}
	return false
}
