package engine

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// budgetPollEvery paces re-reads of a job's allocations, in Nomad's time, where the
// cluster offers no blocking query on them.
const budgetPollEvery = time.Second

// jobAllocWatcher is a cluster with a blocking query on a job's allocations (cluster.Nomad).
type jobAllocWatcher interface {
	WatchJobAllocations(ctx context.Context, namespace, jobID string, afterIndex uint64) ([]*restart.Alloc, uint64, error)
}

// budgets computes, for each group of batch b, how the batch would spend its availability
// budget given the job's allocations now.
func budgets(r *restart.Record, spec restart.Spec, job *restart.Job, b int, allocs []*restart.Alloc) []restart.GroupBudget {
	return budgetsWith(r, spec, job, b, allocs, nil)
}

// budgetsWith is budgets where the allocations of failing (by ID: what they fail) run by
// their task states but fail their health checks: out of service (budgetChecks).
func budgetsWith(r *restart.Record, spec restart.Spec, job *restart.Job, b int, allocs []*restart.Alloc, failing map[string]string) []restart.GroupBudget {
	idx := r.BatchAllocs(b)
	inBatch := map[string]bool{}
	for _, i := range idx {
		inBatch[r.Allocs[i].ID] = true
	}
	failed := map[string]bool{}
	for _, a := range r.Allocs {
		if a.State == restart.AllocFailed {
			failed[a.ID] = true
			if a.Replacement != "" {
				failed[a.Replacement] = true
			}
		}
	}
	byGroup := map[string]*restart.GroupBudget{}
	var groups []string
	for _, i := range idx {
		g := r.Allocs[i].Group
		if byGroup[g] == nil {
			byGroup[g] = &restart.GroupBudget{Group: g}
			groups = append(groups, g)
		}
	}
	live := map[string]int{}
	for _, a := range allocs {
		gb := byGroup[a.Group]
		if gb == nil {
			continue
		}
		if a.DesiredStatus == restart.DesiredRun && a.NextAllocation == "" {
			live[a.Group]++
		}
		switch {
		case restart.Serving(a) && failing[a.ID] != "" && !inBatch[a.ID] && !failed[a.ID]:
			gb.Failing++
			if gb.FailingWhy == "" {
				gb.FailingWhy = fmt.Sprintf("allocation %s: %s", short(a.ID), failing[a.ID])
			}
		case restart.Serving(a):
			gb.Serving++
			if inBatch[a.ID] {
				gb.InBatch++
			}
		case failed[a.ID] && a.DesiredStatus == restart.DesiredRun && a.NextAllocation == "":
			gb.Accepted++
		}
	}
	batchSize := len(idx)
	out := make([]restart.GroupBudget, 0, len(groups))
	sort.Strings(groups)
	for _, g := range groups {
		gb := byGroup[g]
		gb.Count = live[g]
		if grp, ok := job.Group(g); ok && !sysLike(job.Type) {
			gb.Count = grp.Count
		}
		gb.Budget = batchSize
		if spec.MaxUnavailable != nil {
			gb.Budget = spec.MaxUnavailable.Of(gb.Count)
		}
		gb.Budget += surgeBudget(r, g) // -surge: its extra allocations may be spent too
		out = append(out, *gb)
	}
	return out
}

func sysLike(typ string) bool { return typ == "system" || typ == "sysbatch" }

// checkBudgetPlan refuses an explicit -max-unavailable smaller than what one batch takes of
// a group: that batch could never start.
func checkBudgetPlan(rec *restart.Record, job *restart.Job) error {
	mu := rec.Spec.MaxUnavailable
	if mu == nil || sysLike(job.Type) {
		return nil
	}
	for b := 1; b <= rec.Batches; b++ {
		per := map[string]int{}
		for _, i := range rec.BatchAllocs(b) {
			per[rec.Allocs[i].Group]++
		}
		for g, n := range per {
			grp, ok := job.Group(g)
			if !ok {
				continue
			}
			if budget := mu.Of(grp.Count); n > budget {
				return fmt.Errorf("-max-unavailable %s allows %d allocation(s) of group %q out of service at once, but batch %d restarts %d of them; lower -batch-size or raise -max-unavailable",
					restart.FormatBatchSizes([]restart.BatchSize{*mu}), budget, g, b, n)
			}
		}
	}
	return nil
}

// awaitBudget holds batch b until every group's availability budget lets it start. It
// returns true when the batch may start; false when the operator's intent changed (the
// caller obeys it) or when the wait passed its deadline, in which case the batch's
// allocations are recorded failed (not restarted) and -on-error decides what follows.
func (d *driver) awaitBudget(ctx context.Context, b int, first budgetStart) (bool, error) {
	job, err := first.job, first.err
	if err != nil {
		return false, err
	}
	d.mu.Lock()
	var deadline time.Duration
	for _, i := range d.rec.BatchAllocs(b) {
		_, dl := d.spec.HealthTimes(d.rec.Allocs[i].Group)
		deadline = max(deadline, dl)
	}
	d.mu.Unlock()
	checks := first.checks
	d.noteBudgetChecks(b, checks)
	if first.atHand {
		return true, nil
	}
	giveUp := time.NewTimer(deadline)
	defer giveUp.Stop()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := d.watchJobAllocs(wctx)
	var w waitSaver
	var why string
	var allocs []*restart.Alloc
	// recheck re-reads the checks while allocations fail them: they have no blocking
	// query (budgetChecksEvery); nil while nothing fails.
	var recheck <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case u := <-updates:
			if u.err != nil {
				return false, fmt.Errorf("reading the allocations of job %q for its availability budget: %w", d.jobID, u.err)
			}
			allocs = u.allocs
			if checks.due() <= 0 {
				checks.read(ctx, allocs)
			}
		case <-recheck:
			recheck = nil
			checks.read(ctx, allocs)
		case <-d.changed:
			d.mu.Lock()
			intent := d.rec.Control.Intent
			d.mu.Unlock()
			if intent == restart.IntentCancel || intent == restart.IntentPause {
				return false, nil
			}
			continue
		case <-giveUp.C:
			return false, d.failBatch(ctx, b, fmt.Errorf("gave up after %s waiting for the %s", deadline, why))
		}
		if ctx.Err() != nil {
			return false, ctx.Err() // a read cut short is no verdict
		}
		failing := checks.failing(allocs)
		d.noteBudgetChecks(b, checks)
		d.mu.Lock()
		bs := budgetsWith(d.rec, d.spec, job, b, allocs, failing)
		d.mu.Unlock()
		why = ""
		for _, g := range bs {
			if !g.Fits() {
				why = g.Why()
				break
			}
		}
		if why == "" {
			return true, nil
		}
		if len(failing) > 0 && recheck == nil {
			recheck = time.After(max(checks.due(), 0))
		}
		d.log.Info("batch waits for the availability budget", "batch", b, "why", why)
		if err := w.saveBatch(ctx, d, b, why); err != nil {
			return false, err
		}
	}
}

// budgetStart is what the budget reads before a batch: the job, and whether its summary
// already shows the budget at hand.
type budgetStart struct {
	job    *restart.Job
	err    error
	atHand bool
	// checks reads the health checks of the batch's groups (nil: the restart waits for no
	// checks); the fast path read them once already when it could.
	checks *budgetChecks
}

func (d *driver) readBudgetStart(ctx context.Context, b int) budgetStart {
	// The job and its summary are read together: neither depends on the other. Where the
	// driver's feed is synced it counts the groups' allocations itself: the summary is
	// one request less, and a server computes it over every allocation of the job.
	counts, fromFeed := d.feed.groupCounts()
	summary := make(chan *api.JobSummary, 1)
	if fromFeed {
		summary <- nil
	} else {
		go func() { summary <- d.jobSummary(ctx) }()
	}
	job, err := retry(ctx, func() (*restart.Job, error) { return d.readJob(ctx) })
	sum := <-summary
	if err != nil {
		return budgetStart{err: fmt.Errorf("reading job %q for its availability budget: %w", d.jobID, err)}
	}
	if fromFeed {
		sum = &api.JobSummary{Summary: counts}
	}
	st := budgetStart{job: job, atHand: d.budgetAtHand(job, b, sum), checks: newBudgetChecks(d, b)}
	// Groups too big to have their checks read are not: nor is the job's whole list of
	// allocations read before each batch for them (its size grows with the job).
	if st.atHand && st.checks != nil && !st.checks.allTooBig(job) {
		// Every allocation runs, but some may fail their checks: the fast path holds only
		// when none of the batch's groups has one that does.
		allocs, _, err := d.e.cluster.JobAllocations(ctx, d.jobNS, d.jobID)
		if err != nil {
			st.atHand = false
		} else {
			st.checks.read(ctx, allocs)
			st.atHand = len(st.checks.failing(allocs)) == 0
		}
	}
	return st
}

// budgetAtHand reports, from the job's summary (one small read), that every group of batch b
// has all its allocations running, nothing starting or queued, so the batch fits whatever
// the budget; it reports false when it cannot tell, and the caller then reads the
// allocations themselves. The summary spares a read of every allocation of the job before
// each batch, which for a large job costs more than the batch itself. A task restarting
// inside a running allocation does not show in the summary: such an allocation is
// counted only once the summary shows its group short.
func (d *driver) budgetAtHand(job *restart.Job, b int, sum *api.JobSummary) bool {
	if sum == nil || sysLike(job.Type) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, i := range d.rec.BatchAllocs(b) {
		g := d.rec.Allocs[i].Group
		grp, ok := job.Group(g)
		s, found := sum.Summary[g]
		if !ok || !found || s.Running < grp.Count || s.Starting > 0 || s.Queued > 0 {
			return false
		}
	}
	return true
}

// jobSummary reads the job's summary (nil when the cluster offers none or the read failed:
// the budget then reads the allocations themselves).
func (d *driver) jobSummary(ctx context.Context) *api.JobSummary {
	nc, ok := d.e.cluster.(nomadClient)
	if !ok {
		return nil
	}
	sum, _, err := nc.Client().Jobs().Summary(d.jobID, (&api.QueryOptions{Namespace: d.jobNS}).WithContext(ctx))
	if err != nil {
		return nil
	}
	return sum
}

// jobReader reads a job by its exact ID in one request (cluster.Nomad).
type jobReader interface {
	Job(ctx context.Context, namespace, jobID string) (*restart.Job, error)
}

// readJob reads the restart's job: by its exact ID where the cluster can, else as planning
// resolved it.
func (d *driver) readJob(ctx context.Context) (*restart.Job, error) {
	if jr, ok := d.e.cluster.(jobReader); ok {
		return jr.Job(ctx, d.jobNS, d.jobID)
	}
	return d.e.cluster.ResolveJob(ctx, d.jobNS, d.jobID)
}

type allocsUpdate struct {
	allocs []*restart.Alloc
	err    error
}

// watchJobAllocs streams the job's allocations: with a blocking query where the cluster
// offers one, else re-read at budgetPollEvery (Nomad's time).
func (d *driver) watchJobAllocs(ctx context.Context) <-chan allocsUpdate {
	out := make(chan allocsUpdate)
	watcher, blocking := d.e.cluster.(jobAllocWatcher)
	scale := d.e.health.TimeScale
	if scale <= 0 {
		scale = 1
	}
	go func() {
		var index uint64
		var b backoff
		for {
			var allocs []*restart.Alloc
			var next uint64
			var err error
			if blocking {
				allocs, next, err = watcher.WatchJobAllocations(ctx, d.jobNS, d.jobID, index)
			} else {
				if index != 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Duration(float64(budgetPollEvery) / scale)):
					}
				}
				allocs, next, err = d.e.cluster.JobAllocations(ctx, d.jobNS, d.jobID)
				next = max(next, 1)
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil && transient(err) {
				if b.wait(ctx) != nil {
					return
				}
				continue
			}
			b = backoff{}
			index = next
			select {
			case out <- allocsUpdate{allocs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// failBatch records every open allocation of batch b failed without being restarted, and
// makes b the current batch, so that -on-error decides what follows.
func (d *driver) failBatch(ctx context.Context, b int, err error) error {
	return d.step(ctx, func(r *restart.Record) {
		r.CurrentBatch = b
		r.NextBatchAt = time.Time{}
		for _, i := range r.BatchAllocs(b) {
			p := &r.Allocs[i]
			if p.State.Terminal() {
				continue
			}
			p.State = restart.AllocFailed
			p.Error = fmt.Sprintf("Allocation %q was not restarted: %v", p.ID, err)
			p.EndTime = d.e.now()
			p.Waiting = ""
			d.eventLocked(restart.Event{Type: restart.EventAllocFailed, AllocID: p.ID, Batch: p.Batch, Message: p.Error})
		}
	})
}

// saveBatch is save for every allocation of a batch that has not started: they all wait
// for the same thing.
func (w *waitSaver) saveBatch(ctx context.Context, d *driver, b int, reason string) error {
	if reason == w.text {
		return nil
	}
	kind := waitKind(reason)
	now := time.Now()
	newKind := kind != w.kind
	if !newKind && now.Sub(w.saved) < waitingSaveEvery {
		return nil
	}
	w.kind, w.saved, w.text = kind, now, reason
	return d.step(ctx, func(r *restart.Record) {
		for _, i := range r.BatchAllocs(b) {
			if p := &r.Allocs[i]; !p.State.Terminal() {
				p.Waiting = reason
			}
		}
		if newKind {
			d.eventLocked(restart.Event{Type: restart.EventBatchWait, Batch: b,
				Message: fmt.Sprintf("Waiting to restart the %s batch: %s", restart.Ordinal(b), reason)})
		}
	})
}
