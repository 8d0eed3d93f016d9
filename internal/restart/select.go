package restart

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Skipped is an allocation the selection left out, with the reason in Nomad's words (the text
// that follows "Skipping allocation <id> because ").
type Skipped struct {
	Alloc  *Alloc
	Reason string
}

// Selection is what `nomad job restart` would restart: which allocations, which groups and tasks.
type Selection struct {
	Groups []string
	Tasks  []string
	// StartedBefore (Spec.StartedBefore) leaves out the allocations whose targeted tasks
	// all started after it; zero: none is left out for that.
	StartedBefore time.Time
	// CreatedBeforeIndex (Spec.CreatedBeforeIndex) leaves out the allocations created at
	// or after it; zero: none.
	CreatedBeforeIndex uint64
	// OnlyAllocs (Spec.OnlyAllocs) keeps only the allocations with these IDs; nil: all.
	OnlyAllocs []string
}

// IsRunning is Nomad's test of whether an allocation may be restarted: its client status is
// running OR its desired status is run (so pending/run and running/stop allocations pass, as in
// Nomad's command).
func (a *Alloc) IsRunning() bool {
	return a.ClientStatus == ClientRunning || a.DesiredStatus == DesiredRun
}

// HasTask reports whether the allocation has the named task: its task states first (the most
// reliable source), else the group of the job version the allocation was created from, since
// task states appear only after the client reported them. versions may be nil or miss the
// version (garbage-collected), then only task states count.
func (a *Alloc) HasTask(name string, versions map[uint64]*Job) bool {
	if _, ok := a.Tasks[name]; ok {
		return true
	}
	job := versions[a.JobVersion]
	if job == nil {
		return false
	}
	g, ok := job.Group(a.Group)
	return ok && g.HasTask(name)
}

// Select keeps the allocations Nomad's filterAllocs keeps, newest CreateIndex first (the order
// Nomad's client returns them in), and reports the others with the reason. Unlike Nomad's
// verbose line, which swaps them, the desired and client statuses are given in the right order.
func Select(allocs []*Alloc, versions map[uint64]*Job, sel Selection) (kept []*Alloc, skipped []Skipped) {
	sorted := make([]*Alloc, len(allocs))
	copy(sorted, allocs)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CreateIndex > sorted[j].CreateIndex })

	groups := make(map[string]bool, len(sel.Groups))
	for _, g := range sel.Groups {
		groups[g] = true
	}
	for _, a := range sorted {
		switch {
		case !a.IsRunning():
			skipped = append(skipped, Skipped{a, fmt.Sprintf("desired status is %q and client status is %q", a.DesiredStatus, a.ClientStatus)})
		case a.NextAllocation != "":
			skipped = append(skipped, Skipped{a, fmt.Sprintf("it has already been replaced by %q", a.NextAllocation)})
		case len(groups) > 0 && !groups[a.Group]:
			skipped = append(skipped, Skipped{a, "it doesn't have any of requested groups"})
		case len(sel.Tasks) > 0 && !hasAnyTask(a, versions, sel.Tasks):
			skipped = append(skipped, Skipped{a, "it doesn't have any of requested tasks"})
		case sel.OnlyAllocs != nil && !slices.Contains(sel.OnlyAllocs, a.ID):
			skipped = append(skipped, Skipped{a, "none of its templates was re-rendered after its tasks started"})
		case sel.CreatedBeforeIndex > 0 && a.CreateIndex >= sel.CreatedBeforeIndex:
			skipped = append(skipped, Skipped{a, fmt.Sprintf("it was placed after the change it would be restarted for (index %d)", sel.CreatedBeforeIndex)})
		case !sel.StartedBefore.IsZero() && startedSince(a, sel.Tasks, sel.StartedBefore):
			skipped = append(skipped, Skipped{a, fmt.Sprintf("its tasks started after %s, the change it would be restarted for", sel.StartedBefore.UTC().Format(time.RFC3339))})
		default:
			kept = append(kept, a)
		}
	}
	return kept, skipped
}

func hasAnyTask(a *Alloc, versions map[uint64]*Job, tasks []string) bool {
	for _, t := range tasks {
		if a.HasTask(t, versions) {
			return true
		}
	}
	return false
}

// TasksToRestart returns the requested tasks the allocation has, in the order requested and
// without duplicates: one in-place restart request is sent per task, as Nomad's command does.
func TasksToRestart(a *Alloc, versions map[uint64]*Job, requested []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range requested {
		if !seen[t] && a.HasTask(t, versions) {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// startedSince reports whether every targeted task of the allocation (the named ones it
// has, else every task it reported) started or last restarted after t. An allocation
// whose tasks have not reported yet has not started since: it is kept.
func startedSince(a *Alloc, tasks []string, t time.Time) bool {
	names := tasks
	if len(names) == 0 {
		for name := range a.Tasks {
			names = append(names, name)
		}
	}
	seen := 0
	for _, name := range names {
		st, ok := a.Tasks[name]
		if !ok {
			continue
		}
		seen++
		if !st.LatestStart().After(t) {
			return false
		}
	}
	return seen > 0
}
