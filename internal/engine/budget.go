package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// awaitBudget holds batch b until every group's availability budget lets it start. It
// returns true when the batch may start; false when the operator's intent changed (the
// caller obeys it) or when the wait passed its deadline, in which case the batch's
// allocations are recorded failed (not restarted) and -on-error decides what follows.
// Each turn observes the job's allocations (and their checks) and lets restart.Budgets and
// restart.BatchWaitsFor decide.
func (d *driver) awaitBudget(ctx context.Context, b int, first budgetStart) (bool, error) {
	job, err := first.job, first.err
	if err != nil {
		return false, err
	}
	d.mu.Lock()
	deadline := restart.BudgetDeadline(d.rec, d.spec, b)
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
			if d.intentChanged() {
				return false, nil
			}
			continue
		case <-giveUp.C:
			return false, d.failBatch(ctx, b, restart.BudgetGaveUp(deadline, why))
		}
		if ctx.Err() != nil {
			return false, ctx.Err() // a read cut short is no verdict
		}
		if j, ok := d.feed.knownJob(); ok {
			job = j // a scale during the wait changes the budget (no read: the feed knows it)
		}
		failing := checks.failing(allocs)
		d.noteBudgetChecks(b, checks)
		d.mu.Lock()
		why = restart.BatchWaitsFor(restart.Budgets(d.rec, d.spec, job, b, allocs, failing))
		d.mu.Unlock()
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
	summary := make(chan *cluster.JobSummary, 1)
	if fromFeed {
		summary <- nil
	} else {
		go func() { summary <- d.jobSummary(ctx) }()
	}
	job, err := d.guardJob(ctx)
	sum := <-summary
	if err != nil {
		return budgetStart{err: fmt.Errorf("reading job %q for its availability budget: %w", d.jobID, err)}
	}
	if fromFeed {
		sum = &cluster.JobSummary{Summary: counts}
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

// budgetAtHand reports, from the job's summary (one small read), that batch b fits whatever
// the budget (restart.BudgetAtHand); false when it cannot tell, and the caller then reads
// the allocations themselves. The summary spares a read of every allocation of the job
// before each batch, which for a large job costs more than the batch itself.
func (d *driver) budgetAtHand(job *restart.Job, b int, sum *cluster.JobSummary) bool {
	if sum == nil {
		return false
	}
	counts := make(map[string]restart.GroupCounts, len(sum.Summary))
	for g, s := range sum.Summary {
		counts[g] = restart.GroupCounts(s)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return restart.BudgetAtHand(d.rec, job, b, counts)
}

// jobSummary reads the job's summary (nil when the cluster offers none or the read failed:
// the budget then reads the allocations themselves).
func (d *driver) jobSummary(ctx context.Context) *cluster.JobSummary {
	sum, err := d.e.cluster.JobSummary(ctx, d.jobNS, d.jobID)
	if err != nil {
		return nil
	}
	return sum
}

type allocsUpdate struct {
	allocs []*restart.Alloc
	err    error
}

// watchJobAllocs streams the job's allocations with a blocking query. The cluster retries
// transient failures inside; an error it returns ends the stream after it is sent.
func (d *driver) watchJobAllocs(ctx context.Context) <-chan allocsUpdate {
	out := make(chan allocsUpdate)
	go func() {
		var index uint64
		for {
			allocs, next, err := d.e.cluster.WatchJobAllocations(ctx, d.jobNS, d.jobID, index)
			if ctx.Err() != nil {
				return
			}
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
			p.Error = fmt.Sprintf("Allocation %q was not restarted: %v", p.ID, err)
			p.Waiting = ""
			d.endLocked(p, restart.AllocFailed, restart.EventAllocFailed, p.Error)
		}
	})
}

// saveBatch is save for every allocation of a batch that has not started: they all wait
// for the same thing.
func (w *waitSaver) saveBatch(ctx context.Context, d *driver, b int, reason string) error {
	newKind, due := w.due(reason)
	if !due {
		return nil
	}
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
