package sim

import (
	"github.com/hashicorp/nomad/api"
)

// reconcileGeneric is the service and batch scheduler.
func (c *Cluster) reconcileGeneric(j *JobEntry, job *api.Job, plan *evalPlan, o EvalOpts) {
	groups := map[string]bool{}
	for _, tg := range job.TaskGroups {
		groups[*tg.Name] = true
	}
	// Groups no longer in the job, or a stopped job: stop everything.
	for _, ar := range j.Allocs {
		if ar.ServerTerminal() {
			continue
		}
		if Deref(job.Stop) || !groups[ar.Alloc.TaskGroup] {
			c.StopAlloc(ar, descNotNeeded, false)
			plan.du(ar.Alloc.TaskGroup).Stop++
		}
	}
	if Deref(job.Stop) {
		return
	}
	for _, tg := range job.TaskGroups {
		c.reconcileGroup(j, job, tg, plan, o)
	}
}

// placement is one allocation to place.
type placement struct {
	name   string
	prev   *AllocRun
	canary bool
	inDep  bool
	resch  bool
}

// groupReconcile is the reconciliation of one task group (Nomad's allocReconciler for a
// group): its steps run in order, each working on what the earlier ones found.
type groupReconcile struct {
	c    *Cluster
	j    *JobEntry
	job  *api.Job
	tg   *api.TaskGroup
	plan *evalPlan
	name string
	du   *api.DesiredUpdates
	// places are the allocations to place, in the order they are found.
	places []placement
	// current are the allocations at the job's version (or kept at theirs), old the
	// outdated ones a destructive change replaces, inplace the outdated ones updated in place.
	current, old, inplace []*AllocRun
	// rolling: the group has an update strategy, so updates run in a deployment (dep, made
	// when first needed).
	rolling bool
	dep     *api.Deployment
}

func (c *Cluster) reconcileGroup(j *JobEntry, job *api.Job, tg *api.TaskGroup, plan *evalPlan, o EvalOpts) {
	g := &groupReconcile{c: c, j: j, job: job, tg: tg, plan: plan, name: *tg.Name, du: plan.du(*tg.Name)}
	plan.queued[g.name] = 0
	g.splitByVersion(g.replaceLostAndFailed(o))
	upd := tg.Update
	g.rolling = Deref(job.Type) == api.JobTypeService && upd != nil && Deref(upd.MaxParallel) > 0
	if g.rolling {
		g.dep = c.activeDeployment(j, job)
	}
	g.updateOutdated()
	g.matchCount(Deref(tg.Count))
	updated := c.updateInPlace(g.inplace, job, tg, plan, g.rolling, g.deployment)
	if len(g.places) == 0 {
		for _, ar := range g.current {
			if !ar.ServerTerminal() && !updated[ar] {
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
func (g *groupReconcile) replaceLostAndFailed(o EvalOpts) (occupying []*AllocRun) {
	c, du := g.c, g.du
	now := c.Clock.Now()
	for _, ar := range GroupAllocs(g.j, g.name) {
		switch {
		case ar.Alloc.ClientStatus == api.AllocClientStatusLost:
			c.StopAlloc(ar, descLost, false)
			du.Stop++
			if ar.Alloc.NextAllocation == "" {
				g.places = append(g.places, placement{name: ar.Alloc.Name, prev: ar})
				du.Migrate++
			}
		case ar.Alloc.DesiredTransition.Migrate != nil && *ar.Alloc.DesiredTransition.Migrate:
			c.StopAlloc(ar, DescMigrating, Deref(ar.Alloc.DesiredTransition.NoShutdownDelay))
			du.Migrate++
			g.places = append(g.places, placement{name: ar.Alloc.Name, prev: ar})
		case ar.Alloc.ClientStatus == api.AllocClientStatusFailed && ar.Alloc.NextAllocation == "":
			when, ok := c.rescheduleTime(ar, now)
			if ok && (o.ForceReschedule || !when.After(now) || Deref(ar.Alloc.DesiredTransition.ForceReschedule)) {
				c.StopAlloc(ar, descRescheduled, false)
				du.RescheduleNow++
				g.places = append(g.places, placement{name: ar.Alloc.Name, prev: ar, resch: true})
				continue
			}
			if ok && ar.Alloc.FollowupEvalID == "" {
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
func (g *groupReconcile) splitByVersion(occupying []*AllocRun) {
	cur := *g.job.Version
	for _, ar := range occupying {
		if ar.Alloc.Job == nil || *ar.Alloc.Job.Version == cur {
			g.current = append(g.current, ar)
			continue
		}
		if ar.ClientTerminal() {
			// Terminal batch work keeps its version.
			g.current = append(g.current, ar)
			continue
		}
		if !DestructiveChange(ar.Alloc.Job, g.job, g.name) {
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
			g.c.StopAlloc(ar, descUpdating, false)
			g.du.DestructiveUpdate++
			g.places = append(g.places, placement{name: ar.Alloc.Name, prev: ar})
		}
		g.old = nil
	default:
		d := g.deployment()
		if canaries := Deref(g.tg.Update.Canary); canaries > 0 && !d.TaskGroups[g.name].Promoted {
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
		if !Deref(g.tg.Update.AutoPromote) {
			d.StatusDescription = "Deployment is running but requires manual promotion"
		}
		g.c.TouchDeployment(d)
	}
	placed := 0
	for _, ar := range g.current {
		if ar.Alloc.DeploymentID == d.ID && ar.Alloc.DeploymentStatus != nil && ar.Alloc.DeploymentStatus.Canary {
			placed++
		}
	}
	sortByName(g.old)
	for k := placed; k < canaries && k < len(g.old); k++ {
		g.places = append(g.places, placement{name: g.old[k].Alloc.Name, canary: true, inDep: true})
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
		if ar.Alloc.DeploymentID != d.ID {
			continue
		}
		if ar.Alloc.DeploymentStatus != nil && ar.Alloc.DeploymentStatus.Canary {
			canaryNames[ar.Alloc.Name] = true
		}
		if ar.Alloc.DeploymentStatus == nil || ar.Alloc.DeploymentStatus.Healthy == nil {
			inflight++
		}
	}
	var rest []*AllocRun
	for _, ar := range g.old {
		if canaryNames[ar.Alloc.Name] {
			g.c.StopAlloc(ar, descCanaryDone, false)
			g.du.Stop++
			continue
		}
		rest = append(rest, ar)
	}
	limit := Deref(g.tg.Update.MaxParallel) - inflight
	sortByName(rest)
	var keep []*AllocRun
	for _, ar := range rest {
		if limit > 0 {
			limit--
			g.c.StopAlloc(ar, descUpdating, false)
			g.du.DestructiveUpdate++
			g.places = append(g.places, placement{name: ar.Alloc.Name, prev: ar, inDep: true})
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
	all := append(append([]*AllocRun{}, g.old...), g.current...)
	sortByName(all)
	for k := len(all) - 1; k >= 0 && extra > 0; k-- {
		g.c.StopAlloc(all[k], descNotNeeded, false)
		g.du.Stop++
		extra--
	}
}

// placeMissing adds placements until live reaches count: the replacements of orphans first,
// then new allocations under the lowest free names.
func (g *groupReconcile) placeMissing(live, count int) {
	used := map[string]bool{}
	for _, ar := range append(append([]*AllocRun{}, g.current...), g.old...) {
		used[ar.Alloc.Name] = true
	}
	for _, p := range g.places {
		used[p.name] = true
	}
	// Allocations stopped for a migration, a lost node or a reschedule whose
	// replacement could not be placed then are replaced first, linked to them.
	for _, orphan := range orphans(g.j, g.name) {
		if live >= count || used[orphan.Alloc.Name] {
			continue
		}
		used[orphan.Alloc.Name] = true
		g.places = append(g.places, placement{name: orphan.Alloc.Name, prev: orphan, resch: orphan.Alloc.DesiredDescription == descRescheduled})
		live++
	}
	for k := 0; live < count; k++ {
		n := allocName(g.j.Key.ID, g.name, k)
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
			avoid = pl.prev.Node.Node.ID
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
			ar.Alloc.RescheduleTracker = rescheduleTracker(pl.prev, c.Clock.Now())
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
func (c *Cluster) updateInPlace(inplace []*AllocRun, job *api.Job, tg *api.TaskGroup, plan *evalPlan, rolling bool, getDep func() *api.Deployment) map[*AllocRun]bool {
	updated := map[*AllocRun]bool{}
	for _, ar := range inplace {
		if ar.ServerTerminal() {
			continue
		}
		ar.Alloc.EvalID = plan.ev.ID
		ar.Alloc.Job = job
		ar.Group = tg
		ar.JobType = Deref(job.Type)
		var d *api.Deployment
		if rolling {
			d = getDep()
		}
		c.moveToDeployment(ar, d)
		ar.TouchServer("AllocationUpdated")
		plan.du(*tg.Name).InPlaceUpdate++
		updated[ar] = true
	}
	return updated
}

// orphans are a group's allocations stopped to be replaced (migrated, lost, rescheduled)
// whose replacement was never placed.
func orphans(j *JobEntry, group string) []*AllocRun {
	var out []*AllocRun
	for _, ar := range j.Allocs {
		if ar.Alloc.TaskGroup != group || !ar.ServerTerminal() || ar.Alloc.NextAllocation != "" {
			continue
		}
		switch ar.Alloc.DesiredDescription {
		case DescMigrating, descLost, descRescheduled:
			out = append(out, ar)
		}
	}
	sortByName(out)
	return out
}

// DestructiveChange reports whether moving an allocation from job version a to b needs a
// new allocation: anything in the group but its count, update, scaling, reschedule and
// restart blocks, or the job's meta, changed.
func DestructiveChange(a, b *api.Job, group string) bool {
	ta, tb := FindGroup(a, group), FindGroup(b, group)
	if ta == nil || tb == nil {
		return true
	}
	if !EqualJSON(a.Meta, b.Meta) || !EqualJSON(a.Datacenters, b.Datacenters) || !EqualJSON(a.Constraints, b.Constraints) {
		return true
	}
	ca, cb := *ta, *tb
	ca.Count, cb.Count = nil, nil
	ca.Update, cb.Update = nil, nil
	ca.Scaling, cb.Scaling = nil, nil
	ca.ReschedulePolicy, cb.ReschedulePolicy = nil, nil
	ca.RestartPolicy, cb.RestartPolicy = nil, nil
	return !EqualJSON(ca, cb)
}

func FindGroup(job *api.Job, name string) *api.TaskGroup {
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
func (c *Cluster) reconcileSystem(j *JobEntry, job *api.Job, plan *evalPlan, o EvalOpts) {
	groups := map[string]*api.TaskGroup{}
	for _, tg := range job.TaskGroups {
		groups[*tg.Name] = tg
	}
	for _, ar := range j.Allocs {
		if ar.ServerTerminal() {
			continue
		}
		if Deref(job.Stop) || groups[ar.Alloc.TaskGroup] == nil {
			c.StopAlloc(ar, descNotNeeded, false)
			plan.du(ar.Alloc.TaskGroup).Stop++
		}
	}
	if Deref(job.Stop) {
		return
	}
	for _, tg := range job.TaskGroups {
		name := *tg.Name
		du := plan.du(name)
		onNode := map[string]*AllocRun{}
		for _, ar := range GroupAllocs(j, name) {
			if ar.Alloc.DesiredTransition.Migrate != nil && *ar.Alloc.DesiredTransition.Migrate {
				c.StopAlloc(ar, DescMigrating, Deref(ar.Alloc.DesiredTransition.NoShutdownDelay))
				du.Stop++
				continue
			}
			if ar.Alloc.ClientStatus == api.AllocClientStatusLost {
				c.StopAlloc(ar, descLost, false)
				du.Stop++
				continue
			}
			if ar.Alloc.Job != nil && *ar.Alloc.Job.Version != *job.Version && !ar.ClientTerminal() {
				if DestructiveChange(ar.Alloc.Job, job, name) {
					c.StopAlloc(ar, descUpdating, false)
					du.DestructiveUpdate++
					continue
				}
				ar.Alloc.Job, ar.Group = job, tg
				ar.TouchServer("AllocationUpdated")
				du.InPlaceUpdate++
			}
			onNode[ar.Node.Node.ID] = ar
		}
		if plan.ev.TriggeredBy == "alloc-stop" {
			continue
		}
		p := c.newPlacer(j, job, tg)
		failedN := 0
		for _, n := range p.feasible {
			if onNode[n.Node.ID] != nil {
				du.Ignore++
				continue
			}
			if Deref(job.Type) == api.JobTypeSysbatch && c.sysbatchDone(j, name, n.Node.ID, *job.Version) {
				continue
			}
			if n.usedCPU+p.cpu > nodeCPU || n.usedMem+p.mem > nodeMemory {
				failedN++
				continue
			}
			var prev *AllocRun
			for _, ar := range j.Allocs {
				if ar.Alloc.TaskGroup == name && ar.Node == n && ar.Alloc.NextAllocation == "" && ar.ServerTerminal() && ar.Alloc.DesiredDescription != descNotNeeded {
					prev = ar
				}
			}
			c.placeAlloc(j, job, tg, allocName(j.Key.ID, name, 0), n, plan.ev, prev, nil, false, p.metric)
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
func (c *Cluster) sysbatchDone(j *JobEntry, group, nodeID string, version uint64) bool {
	for _, ar := range j.Allocs {
		if ar.Alloc.TaskGroup == group && ar.Node.Node.ID == nodeID && ar.Alloc.ClientStatus == api.AllocClientStatusComplete && ar.Alloc.Job != nil && *ar.Alloc.Job.Version == version {
			return true
		}
	}
	return false
}
