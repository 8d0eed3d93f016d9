package fleet

import (
	"cmp"
	"slices"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// OrderBy is -order: in which order a fleet's jobs take their turn.
type OrderBy string

const (
	// OrderName sorts by namespace, then job ID: predictable, and what an operator
	// reading `status` expects.
	OrderName OrderBy = "name"
	// OrderPriority restarts the jobs of highest Nomad priority first (ties by name), so
	// the most important services get fixed first.
	OrderPriority OrderBy = "priority"
	// OrderListed keeps the selection's order, for operators who list jobs in the order
	// their dependencies need.
	OrderListed OrderBy = "listed"
)

// ParseOrderBy parses -order: "name", "priority" or "listed", exactly.
func ParseOrderBy(s string) (OrderBy, error) {
	switch OrderBy(s) {
	case OrderName, OrderPriority, OrderListed:
		return OrderBy(s), nil
	}
	return "", &restart.ValueError{Flag: "order", Value: s, Reason: `valid options are "name", "priority" and "listed"`}
}

// Order returns the jobs in the order by gives, leaving jobs untouched; the sort is stable
// so that equal jobs keep their listed order and the result is the same on every run.
func Order(jobs []Job, by OrderBy) ([]Job, error) {
	if _, err := ParseOrderBy(string(by)); err != nil {
		return nil, err
	}
	out := slices.Clone(jobs)
	switch by {
	case OrderName:
		slices.SortStableFunc(out, byName)
	case OrderPriority:
		slices.SortStableFunc(out, func(a, b Job) int {
			return cmp.Or(cmp.Compare(b.Priority, a.Priority), byName(a, b))
		})
	}
	return out, nil
}

func byName(a, b Job) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.JobID, b.JobID))
}
