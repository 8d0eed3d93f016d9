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

// groupReconcile is the reconciliation of one task group (Nomad's allocReconciler for a
// group): its steps run in order, each working on what the earlier ones found.
type groupReconcile struct {
	c    *Cluster
	j    *jobEntry
	job  *api.Job
	tg   *api.TaskGroup
	plan *evalPlan
	name string
	du   *api.DesiredUpdates
	// places are the allocations to place, in the order they are found.
	places []placement
	// current are the allocations at the job's version (or kept at theirs), old the
	// outdated ones a destructive change replaces, inplace the outdated ones updated in place.
	current, old, inplace []*allocRun
	// rolling: the group has an update strategy, so updates run in a deployment (dep, made
	// when first needed).
	rolling bool
	dep     *api.Deployment
}

func (c *Cluster) reconcileGroup(j *jobEntry, job *api.Job, tg *api.TaskGroup, plan *evalPlan, o evalOpts) {
	g := &groupReconcile{c: c, j: j, job: job, tg: tg, plan: plan, name: *tg.Name, du: plan.du(*tg.Name)}
	plan.queued[g.name] = 0
	g.splitByVersion(g.replaceLostAndFailed(o))
	upd := tg.Update
	g.rolling = deref(job.Type) == api.JobTypeService && upd != nil && deref(upd.MaxParallel) > 0
	if g.rolling {
		g.dep = c.activeDeployment(j, job)
	}
	g.updateOutdated()
	g.matchCount(deref(tg.Count))
	updated := c.updateInPlace(g.inplace, job, tg, plan, g.rolling, g.deployment)
	if len(g.places) == 0 {
		for _, ar := range g.current {
			if !ar.serverTerminal() && !updated[ar] {
				g.du.Ignore++
			}
		}
		return
	}
	g.placeAll()
}

// deployment is the deployment the group's updates run in, created when first needed; nil
// without an update strategy.
func (g *groupReconcile) deployment() *api.Deployment {
	if !g.rolling {
		return nil
	}
	if g.dep == nil {
		g.dep = g.c.createDeployment(g.j, g.job)
	}
	// The evaluation names the deployment its plan created or advanced.
	g.plan.ev.DeploymentID = g.dep.ID
	return g.dep
}

// replaceLostAndFailed stops the allocations of lost nodes, those asked to migrate and the
// failed ones due for rescheduling, adding their replacements to the places, and returns
// the allocations that keep their place.
func (g *groupReconcile) replaceLostAndFailed(o evalOpts) (occupying []*allocRun) {
	c, du := g.c, g.du
	now := c.clk.now()
	for _, ar := range groupAllocs(g.j, g.name) {
		switch {
		case ar.a.ClientStatus == api.AllocClientStatusLost:
			c.stopAlloc(ar, descLost, false)
			du.Stop++
			if ar.a.NextAllocation == "" {
				g.places = append(g.places, placement{name: ar.a.Name, prev: ar})
				du.Migrate++
			}
		case ar.a.DesiredTransition.Migrate != nil && *ar.a.DesiredTransition.Migrate:
			c.stopAlloc(ar, descMigrating, deref(ar.a.DesiredTransition.NoShutdownDelay))
			du.Migrate++
			g.places = append(g.places, placement{name: ar.a.Name, prev: ar})
		case ar.a.ClientStatus == api.AllocClientStatusFailed && ar.a.NextAllocation == "":
			when, ok := c.rescheduleTime(ar, now)
			if ok && (o.forceReschedule || !when.After(now) || deref(ar.a.DesiredTransition.ForceReschedule)) {
				c.stopAlloc(ar, descRescheduled, false)
				du.RescheduleNow++
				g.places = append(g.places, placement{name: ar.a.Name, prev: ar, resch: true})
				continue
			}
			if ok && ar.a.FollowupEvalID == "" {
				du.RescheduleLater++
				c.scheduleFollowup(g.j, ar, when)
			}
			occupying = append(occupying, ar)
		default:
			occupying = append(occupying, ar)
		}
	}
	return occupying
}

// splitByVersion sorts the occupying allocations by version: outdated allocations are
// updated in place or destructively.
func (g *groupReconcile) splitByVersion(occupying []*allocRun) {
	cur := *g.job.Version
	for _, ar := range occupying {
		if ar.a.Job == nil || *ar.a.Job.Version == cur {
			g.current = append(g.current, ar)
			continue
		}
		if ar.clientTerminal() {
			// Terminal batch work keeps its version.
			g.current = append(g.current, ar)
			continue
		}
		if !destructiveChange(ar.a.Job, g.job, g.name) {
			// Updated in place below, once the count has stopped what it does not
			// need (Nomad stops before it updates: a stopped allocation keeps its version).
			g.inplace = append(g.inplace, ar)
			g.current = append(g.current, ar)
			continue
		}
		g.old = append(g.old, ar)
	}
}

// updateOutdated replaces the outdated allocations: all at once without an update strategy,
// else canaries first (when the group wants them and they are not promoted), then at most
// max_parallel at a time.
func (g *groupReconcile) updateOutdated() {
	switch {
	case len(g.old) == 0:
	case !g.rolling:
		// No update strategy: every outdated allocation is replaced at once.
		for _, ar := range g.old {
			g.c.stopAlloc(ar, descUpdating, false)
			g.du.DestructiveUpdate++
			g.places = append(g.places, placement{name: ar.a.Name, prev: ar})
		}
		g.old = nil
	default:
		d := g.deployment()
		if canaries := deref(g.tg.Update.Canary); canaries > 0 && !d.TaskGroups[g.name].Promoted {
			g.placeCanaries(d, canaries)
			return
		}
		g.rollOutdated(d)
	}
}

// placeCanaries places the canaries still missing; the outdated allocations all stay.
func (g *groupReconcile) placeCanaries(d *api.Deployment, canaries int) {
	st := d.TaskGroups[g.name]
	// Canaries are wanted only when a destructive change meets running
	// allocations (never on a first deployment).
	if st.DesiredCanaries != canaries {
		st.DesiredCanaries = canaries
		if !deref(g.tg.Update.AutoPromote) {
			d.StatusDescription = "Deployment is running but requires manual promotion"
		}
		g.c.touchDeployment(d)
	}
	placed := 0
	for _, ar := range g.current {
		if ar.a.DeploymentID == d.ID && ar.a.DeploymentStatus != nil && ar.a.DeploymentStatus.Canary {
			placed++
		}
	}
	sortByName(g.old)
	for k := placed; k < canaries && k < len(g.old); k++ {
		g.places = append(g.places, placement{name: g.old[k].a.Name, canary: true, inDep: true})
		g.du.Canary++
	}
	g.du.Ignore += uint64(len(g.old))
	// During the canary phase the old allocations stay and count stays met.
	g.current = append(g.current, g.old...)
	g.old = nil
}

// rollOutdated stops the outdated allocations that promoted canaries replace, then replaces
// as many others as max_parallel leaves room for beside the deployment's unhealthy ones.
func (g *groupReconcile) rollOutdated(d *api.Deployment) {
	// Promoted canaries replace the old allocations of the same names.
	canaryNames := map[string]bool{}
	inflight := 0
	for _, ar := range g.current {
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
	for _, ar := range g.old {
		if canaryNames[ar.a.Name] {
			g.c.stopAlloc(ar, descCanaryDone, false)
			g.du.Stop++
			continue
		}
		rest = append(rest, ar)
	}
	limit := deref(g.tg.Update.MaxParallel) - inflight
	sortByName(rest)
	var keep []*allocRun
	for _, ar := range rest {
		if limit > 0 {
			limit--
			g.c.stopAlloc(ar, descUpdating, false)
			g.du.DestructiveUpdate++
			g.places = append(g.places, placement{name: ar.a.Name, prev: ar, inDep: true})
			continue
		}
		keep = append(keep, ar)
		g.du.Ignore++
	}
	g.old = keep
}

// matchCount places what is missing from the group's count and stops what is extra.
func (g *groupReconcile) matchCount(count int) {
	live := len(g.current) + len(g.old) + len(g.places)
	for _, p := range g.places {
		if p.canary {
			live--
		}
	}
	if live > count {
		g.stopExtra(live - count)
	}
	if live < count {
		g.placeMissing(live, count)
	}
}

// stopExtra stops extra allocations, the highest name indexes first, as Nomad does when
// scaling down.
func (g *groupReconcile) stopExtra(extra int) {
	all := append(append([]*allocRun{}, g.old...), g.current...)
	sortByName(all)
	for k := len(all) - 1; k >= 0 && extra > 0; k-- {
		g.c.stopAlloc(all[k], descNotNeeded, false)
		g.du.Stop++
		extra--
	}
}

// placeMissing adds placements until live reaches count: the replacements of orphans first,
// then new allocations under the lowest free names.
func (g *groupReconcile) placeMissing(live, count int) {
	used := map[string]bool{}
	for _, ar := range append(append([]*allocRun{}, g.current...), g.old...) {
		used[ar.a.Name] = true
	}
	for _, p := range g.places {
		used[p.name] = true
	}
	// Allocations stopped for a migration, a lost node or a reschedule whose
	// replacement could not be placed then are replaced first, linked to them.
	for _, orphan := range orphans(g.j, g.name) {
		if live >= count || used[orphan.a.Name] {
			continue
		}
		used[orphan.a.Name] = true
		g.places = append(g.places, placement{name: orphan.a.Name, prev: orphan, resch: orphan.a.DesiredDescription == descRescheduled})
		live++
	}
	for k := 0; live < count; k++ {
		n := allocName(g.j.key.id, g.name, k)
		if used[n] {
			continue
		}
		used[n] = true
		g.places = append(g.places, placement{name: n, inDep: true})
		live++
	}
}

// placeAll places the placements on nodes; those no node fits are the plan's failed and
// queued allocations.
func (g *groupReconcile) placeAll() {
	c := g.c
	p := c.newPlacer(g.j, g.job, g.tg)
	failedN := 0
	for _, pl := range g.places {
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
			d = g.deployment()
		}
		ar := c.placeAlloc(g.j, g.job, g.tg, pl.name, n, g.plan.ev, pl.prev, d, pl.canary, p.metric)
		if pl.resch && pl.prev != nil {
			ar.a.RescheduleTracker = rescheduleTracker(pl.prev, c.clk.now())
		}
		if !pl.canary && pl.prev == nil {
			g.du.Place++
		}
	}
	if failedN > 0 {
		m := *p.metric
		m.CoalescedFailures = failedN - 1
		g.plan.failed[g.name] = &m
		g.plan.queued[g.name] = failedN
	} else {
		g.plan.queued[g.name] = 0
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
