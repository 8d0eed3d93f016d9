package restart

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseMaxUnavailable parses -max-unavailable: "n" allocations or "n%" of a group's count,
// greater than zero (a budget of zero would never let a batch start).
func ParseMaxUnavailable(s string) (BatchSize, error) {
	s = strings.TrimSpace(s)
	if !batchSizeRe.MatchString(s) {
		return BatchSize{}, fmt.Errorf("invalid -max-unavailable value %q: give a number of allocations like 1, or a percentage of each group like 25%%", s)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || n <= 0 || (strings.HasSuffix(s, "%") && n > 100) {
		return BatchSize{}, fmt.Errorf("invalid -max-unavailable value %q: it must be greater than zero (and at most 100%%)", s)
	}
	return BatchSize{N: n, Percent: strings.HasSuffix(s, "%")}, nil
}

// Of is the size for a group of n allocations: a percentage rounded up, at least 1, as
// batch sizes are computed.
func (b BatchSize) Of(n int) int {
	k := b.N
	if b.Percent {
		k = (n*b.N + 99) / 100
	}
	return max(k, 1)
}

// Serving reports whether an allocation serves: desired to run, not replaced, running,
// with every task running (or, for a task that ran to completion such as a prestart
// hook, finished successfully).
func Serving(a *Alloc) bool {
	if a == nil || a.DesiredStatus != DesiredRun || a.NextAllocation != "" || a.ClientStatus != ClientRunning {
		return false
	}
	running := 0
	for _, ts := range a.Tasks {
		switch {
		case ts.State == TaskRunning:
			running++
		case ts.State == TaskDead && !ts.Failed:
		default:
			return false
		}
	}
	return running > 0 || a.Tasks == nil
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
