package restart

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ParseMaxUnavailable parses -max-unavailable: "n" allocations or "n%" of a group's count,
// greater than zero (a budget of zero would never let a batch start).
func ParseMaxUnavailable(s string) (BatchSize, error) {
	s = strings.TrimSpace(s)
	if !batchSizeRe.MatchString(s) {
		return BatchSize{}, &ValueError{Flag: "max-unavailable", Value: s, Reason: "give a number of allocations like 1, or a percentage of each group like 25%"}
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || n <= 0 || (strings.HasSuffix(s, "%") && n > 100) {
		return BatchSize{}, &ValueError{Flag: "max-unavailable", Value: s, Reason: "it must be greater than zero (and at most 100%)"}
	}
	return BatchSize{N: n, Percent: strings.HasSuffix(s, "%")}, nil
}

// Of is the size for a group of n allocations: a percentage rounded up, at least 1, as
// batch sizes are computed.
func (b BatchSize) Of(n int) int {
	k := b.N
	if b.Percent {
		k = percentOf(n, b.N)
	}
	return max(k, 1)
}

// percentOf is p% of n rounded up. 100% and more is all of n, as Nomad's float arithmetic
// gives it: n*p would overflow for a percentage as large as -batch-size accepts (any int).
func percentOf(n, p int) int {
	if p >= 100 {
		return n
	}
	return (n*p + 99) / 100
}

// Serving reports whether an allocation serves: desired to run, not replaced, running,
// with every task running (or, for a task that ran to completion such as a prestart
// hook, finished successfully).
func Serving(a *Alloc) bool {
	if a == nil || a.DesiredStatus != DesiredRun || a.NextAllocation != "" || a.ClientStatus != ClientRunning {
		return false
	}
	return a.Tasks == nil || allTasksUp(a.Tasks)
}

// allTasksUp reports whether every task runs or, for a task that ran to completion such as
// a prestart hook, finished successfully, and at least one runs: the "all tasks up" rule
// of a serving allocation and of a replacement under -health running.
func allTasksUp(tasks map[string]TaskState) bool {
	running := 0
	for _, ts := range tasks {
		switch {
		case ts.State == TaskRunning:
			running++
		case ts.State == TaskDead && !ts.Failed:
		default:
			return false
		}
	}
	return running > 0
}

// GroupBudget is how a batch would spend a group's availability budget.
type GroupBudget struct {
	Group string
	// Count is the group's allocation count; Serving how many of its allocations serve now.
	Count, Serving int
	// Failing are allocations outside the batch that run by their task states but fail
	// their health checks (-health checks): out of service, and not counted in Serving.
	// FailingWhy is what the first of them fails ("allocation 1a2b3c4d: check http
	// (consul) critical"), for the operator.
	Failing    int
	FailingWhy string
	// Accepted are allocations this restart already reported failed (the operator chose to
	// go on past them): they are not counted again.
	Accepted int
	// InBatch is how many of the batch's allocations belong to the group and serve now
	// (they are about to stop serving).
	InBatch int
	// Budget is the most that may be out of service at once.
	Budget int
}

// Unavailable is how many allocations of the group would be out of service once the
// batch starts: those already out (less the accepted ones) plus the batch's.
func (g GroupBudget) Unavailable() int {
	out := max(g.Count-g.Serving-g.Accepted, 0)
	return out + g.InBatch
}

// Fits reports whether the batch may start for this group. (Planning refuses a budget
// smaller than a batch's share of a group, which could never fit.)
func (g GroupBudget) Fits() bool {
	return g.Unavailable() <= g.Budget
}

// Why says what the batch waits for, in the operator's words.
func (g GroupBudget) Why() string {
	failing := ""
	if g.Failing > 0 {
		failing = fmt.Sprintf(" (%d failing their health checks", g.Failing)
		if g.Failing == 1 {
			failing = " (1 failing its health checks"
		}
		if g.FailingWhy != "" {
			failing += ", " + g.FailingWhy
		}
		failing += ")"
	}
	return fmt.Sprintf("availability budget of group %q: %d of %d allocations out of service%s, %d more to restart, at most %d at once",
		g.Group, max(g.Count-g.Serving-g.Accepted, 0), g.Count, failing, g.InBatch, g.Budget)
}

// SystemLike reports whether the job's groups have no count of their own: a system or
// sysbatch job runs one allocation per eligible node, so its group's size is what runs.
func SystemLike(jobType string) bool { return jobType == "system" || jobType == "sysbatch" }

// Budgets computes, for each group of batch b, how the batch would spend its availability
// budget given the job's allocations now. The allocations of failing (by ID: what they fail)
// run by their task states but fail their health checks: they count out of service.
func Budgets(r *Record, spec Spec, job *Job, b int, allocs []*Alloc, failing map[string]string) []GroupBudget {
	idx := r.BatchAllocs(b)
	inBatch := map[string]bool{}
	for _, i := range idx {
		inBatch[r.Allocs[i].ID] = true
	}
	failed := acceptedFailures(r)
	byGroup := map[string]*GroupBudget{}
	var groups []string
	for _, i := range idx {
		g := r.Allocs[i].Group
		if byGroup[g] == nil {
			byGroup[g] = &GroupBudget{Group: g}
			groups = append(groups, g)
		}
	}
	live := map[string]int{}
	for _, a := range allocs {
		gb := byGroup[a.Group]
		if gb == nil {
			continue
		}
		if a.DesiredStatus == DesiredRun && a.NextAllocation == "" {
			live[a.Group]++
		}
		switch {
		case Serving(a) && failing[a.ID] != "" && !inBatch[a.ID] && !failed[a.ID]:
			gb.Failing++
			if gb.FailingWhy == "" {
				gb.FailingWhy = fmt.Sprintf("allocation %s: %s", shortID(a.ID), failing[a.ID])
			}
		case Serving(a):
			gb.Serving++
			if inBatch[a.ID] {
				gb.InBatch++
			}
		case failed[a.ID] && a.DesiredStatus == DesiredRun && a.NextAllocation == "":
			gb.Accepted++
		}
	}
	out := make([]GroupBudget, 0, len(groups))
	sort.Strings(groups)
	for _, g := range groups {
		gb := byGroup[g]
		gb.Count = live[g]
		if grp, ok := job.Group(g); ok && !SystemLike(job.Type) {
			gb.Count = grp.Count
		}
		gb.Budget = len(idx)
		if spec.MaxUnavailable != nil {
			gb.Budget = spec.MaxUnavailable.Of(gb.Count)
		}
		gb.Budget += SurgeBudget(r, g) // -surge: its extra allocations may be spent too
		out = append(out, *gb)
	}
	return out
}

// acceptedFailures are the allocations this restart reported failed, and their
// replacements: the operator chose to go on past them.
func acceptedFailures(r *Record) map[string]bool {
	failed := map[string]bool{}
	for _, a := range r.Allocs {
		if a.State == AllocFailed {
			failed[a.ID] = true
			if a.Replacement != "" {
				failed[a.Replacement] = true
			}
		}
	}
	return failed
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// BatchWaitsFor says what batch b waits for given its groups' budgets: "" when every group's
// budget lets it start now, else why the first group's does not.
func BatchWaitsFor(budgets []GroupBudget) string {
	for _, g := range budgets {
		if !g.Fits() {
			return g.Why()
		}
	}
	return ""
}

// BudgetDeadline bounds the wait of batch b for its availability budget: the longest
// healthy deadline (Nomad's time) of its groups.
func BudgetDeadline(r *Record, spec Spec, b int) time.Duration {
	var deadline time.Duration
	for _, i := range r.BatchAllocs(b) {
		_, dl := spec.HealthTimes(r.Allocs[i].Group)
		deadline = max(deadline, dl)
	}
	return deadline
}

// BudgetGaveUp is why batch b fails, without a restart, when its budget did not free up
// within deadline; why is what it waited for last.
func BudgetGaveUp(deadline time.Duration, why string) error {
	return fmt.Errorf("gave up after %s waiting for the %s", deadline, why)
}

// GroupCounts are a group's allocations counted by client status, as Nomad's job summary
// counts them.
type GroupCounts struct {
	Queued, Starting, Running int
}

// BudgetAtHand reports, from the job's allocation counts by group (its summary: one small
// read), that every group of batch b has all its allocations running, nothing starting or
// queued, so that the batch fits whatever the budget. It reports false when it cannot
// tell (no counts, a system job whose groups have no count): the allocations themselves
// are then read. A task restarting inside a running allocation does not show in the
// counts: such an allocation is counted only once its group shows short.
func BudgetAtHand(r *Record, job *Job, b int, counts map[string]GroupCounts) bool {
	if counts == nil || SystemLike(job.Type) {
		return false
	}
	for _, i := range r.BatchAllocs(b) {
		g := r.Allocs[i].Group
		grp, ok := job.Group(g)
		c, found := counts[g]
		if !ok || !found || c.Running < grp.Count || c.Starting > 0 || c.Queued > 0 {
			return false
		}
	}
	return true
}

// BudgetPlanRefusal refuses an explicit -max-unavailable smaller than what one batch takes
// of a group: that batch could never start.
func BudgetPlanRefusal(rec *Record, job *Job) error {
	mu := rec.Spec.MaxUnavailable
	if mu == nil || SystemLike(job.Type) {
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
					FormatBatchSizes([]BatchSize{*mu}), budget, g, b, n)
			}
		}
	}
	return nil
}
