package page

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// The availability budget per group over time, drawn under the batch lanes: for each
// targeted group, how many of its allocations the restart held out of service at each
// moment (an allocation is out from its restart request until it is healthy or failed, as
// its bar shows), as a filled step area, against the group's budget (-max-unavailable, or
// the batch size without it, as restart.Budgets resolves it) drawn as a line. The area is
// the peak of each bucket of tlBudgetBucket units, so a lane is a fixed number of SVG
// elements with at most tlChartWidth/tlBudgetBucket steps however many allocations the
// restart has, and no spike narrower than a bucket disappears.

const (
	tlBudgetLaneHeight = 44 // one group's lane, its label included
	tlBudgetPlotHeight = 28 // the height of the plot within the lane
	tlBudgetBucket     = 2  // width of the buckets the area aggregates, in SVG units
)

// tlBudgetLane is one group's lane.
type tlBudgetLane struct {
	Group string
	Y     int // top of the lane
	// Steps are the exact counts out of service, one per change (Out from At on), and
	// Budgets the group's budget in force from each batch's start.
	Steps   []tlStep
	Budgets []tlStep
	// Peak is the most allocations out of service at once, first reached at PeakAt, when
	// the budget was PeakBudget.
	Peak, PeakBudget int
	PeakAt           time.Time
	Over             bool // the peak passed the budget
	// Drawn: the area's and the budget line's path data, the peak's mark and the labels.
	Area, BudgetLine string
	PeakX, PeakY     int
	LabelAtEnd       bool // the peak's label ends at the peak (it would pass the chart's right edge)
	Label, PeakLabel string
	Desc             string
}

// tlStep is a value of a step function from At on (X is At on the chart).
type tlStep struct {
	At  time.Time
	X   int
	Out int
}

func (s tlStep) String() string { return fmt.Sprintf("%s:%d", s.At.Format("15:04:05"), s.Out) }

// budgetLanes lays out one lane per targeted group, in name order, from y down.
func budgetLanes(rec *restart.Record, sc tlScale, end time.Time, y int) []tlBudgetLane {
	budgets := groupBudgetSteps(rec, sc)
	out := outOfServiceSteps(rec, sc, end)
	groups := make([]string, 0, len(budgets))
	for g := range budgets {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	lanes := make([]tlBudgetLane, 0, len(groups))
	for i, g := range groups {
		lane := tlBudgetLane{Group: g, Y: y + i*tlBudgetLaneHeight, Steps: out[g], Budgets: budgets[g]}
		lane.draw(sc, end)
		lanes = append(lanes, lane)
	}
	return lanes
}

// draw computes the lane's peak, paths and labels.
func (l *tlBudgetLane) draw(sc tlScale, end time.Time) {
	for _, s := range l.Steps {
		if s.Out > l.Peak {
			l.Peak, l.PeakAt = s.Out, s.At
		}
	}
	at := l.PeakAt
	if l.Peak == 0 {
		at = sc.start
	}
	l.PeakBudget = valueAt(l.Budgets, at)
	l.Over = l.Peak > l.PeakBudget
	top := l.PeakBudget
	for _, b := range l.Budgets {
		top = max(top, b.Out)
	}
	top = max(top, l.Peak, 1)
	base := l.Y + tlBudgetLaneHeight - 4
	yOf := func(v int) int { return base - v*tlBudgetPlotHeight/top }
	l.Area = areaPath(bucketPeaks(l.Steps, sc, end), yOf, base)
	l.BudgetLine = linePath(l.Budgets, sc, end, yOf)
	l.PeakX, l.PeakY = sc.x(at), yOf(l.Peak)
	l.LabelAtEnd = l.PeakX > tlLabelWidth+tlChartWidth-160
	name := l.Group
	if name == "" {
		name = "(no group)"
	}
	l.Label = "group " + name
	l.PeakLabel = fmt.Sprintf("out of service %d / budget %d", l.Peak, l.PeakBudget)
	over := ""
	if l.Over {
		over = ", over the budget"
	}
	l.Desc = fmt.Sprintf("Availability budget of group %s: at most %d of its allocations out of service at once because of the restart (at %s), against a budget of %d%s.",
		name, l.Peak, stamp(at), l.PeakBudget, over)
}

// outOfServiceSteps counts, per group, the allocations out of service at each change: an
// allocation is out from its restart request (StartTime) until its end (EndTime: healthy
// or failed), or until end while it is in flight. Skipped and pending ones never were.
func outOfServiceSteps(rec *restart.Record, sc tlScale, end time.Time) map[string][]tlStep {
	type change struct {
		at time.Time
		d  int
	}
	changes := map[string][]change{}
	for _, p := range rec.Allocs {
		if p.StartTime.IsZero() || p.State == restart.AllocSkipped {
			continue
		}
		stop := p.EndTime
		if stop.IsZero() || stop.After(end) {
			stop = end
		}
		if stop.Before(p.StartTime) {
			stop = p.StartTime // clocks that disagree: out for no time, never a negative count
		}
		changes[p.Group] = append(changes[p.Group], change{p.StartTime, +1}, change{stop, -1})
	}
	out := map[string][]tlStep{}
	for g, cs := range changes {
		// At one instant, ends before starts: an allocation healthy at t and the next one
		// requested at t were never out together.
		slices.SortFunc(cs, func(a, b change) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.d - b.d
		})
		var steps []tlStep
		n := 0
		for i, c := range cs {
			n += c.d
			if i+1 < len(cs) && cs[i+1].at.Equal(c.at) {
				continue // one step per instant
			}
			if len(steps) > 0 && steps[len(steps)-1].Out == n {
				continue
			}
			steps = append(steps, tlStep{At: c.at, X: sc.x(c.at), Out: n})
		}
		out[g] = steps
	}
	return out
}

// groupBudgetSteps is, per targeted group, its budget from each batch's start on, as
// restart.Budgets resolves it for that batch (the first batch's before any started). The
// record keeps no group counts: a group's count is taken as its allocations in the plan (or
// the count before its surge, when it surged), which is the group's count unless the
// restart was narrowed (-filter, -node, -datacenter) or allocations were not running when
// it was planned.
func groupBudgetSteps(rec *restart.Record, sc tlScale) map[string][]tlStep {
	job, allocs := budgetFacts(rec)
	starts := map[int]time.Time{}
	groupsOf := map[int][]string{}
	sizes := map[int]int{}
	for _, p := range rec.Allocs {
		sizes[p.Batch]++
		if !slices.Contains(groupsOf[p.Batch], p.Group) {
			groupsOf[p.Batch] = append(groupsOf[p.Batch], p.Group)
		}
		if !p.StartTime.IsZero() && (starts[p.Batch].IsZero() || p.StartTime.Before(starts[p.Batch])) {
			starts[p.Batch] = p.StartTime
		}
	}
	batches := make([]int, 0, len(sizes))
	for b := range sizes {
		batches = append(batches, b)
	}
	sort.Ints(batches)
	// A group's budget depends on the batch only through the batch's size: Budgets is
	// asked once per size and group, not once per batch.
	type key struct {
		size  int
		group string
	}
	memo := map[key]int{}
	out := map[string][]tlStep{}
	for _, b := range batches {
		for _, g := range groupsOf[b] {
			k := key{sizes[b], g}
			if _, ok := memo[k]; !ok {
				for _, gb := range restart.Budgets(rec, rec.Spec, job, b, allocs, nil) {
					memo[key{sizes[b], gb.Group}] = gb.Budget
				}
			}
			at := starts[b]
			switch {
			case len(out[g]) == 0:
				at = sc.start // the first batch's budget holds from the start
			case at.IsZero():
				continue // not started: its budget was never in force
			}
			if steps := out[g]; len(steps) == 0 || steps[len(steps)-1].Out != memo[k] {
				out[g] = append(steps, tlStep{At: at, X: sc.x(at), Out: memo[k]})
			}
		}
	}
	return out
}

// budgetFacts stands in for the job and its allocations that restart.Budgets reads, from
// what the record holds: each group counts its planned allocations (or its count before a
// surge), and each planned allocation is a live one of its group (what a system job's
// groups are counted by).
func budgetFacts(rec *restart.Record) (*restart.Job, []*restart.Alloc) {
	counts := map[string]int{}
	var order []string
	allocs := make([]*restart.Alloc, 0, len(rec.Allocs))
	for _, p := range rec.Allocs {
		if _, ok := counts[p.Group]; !ok {
			order = append(order, p.Group)
		}
		counts[p.Group]++
		allocs = append(allocs, &restart.Alloc{ID: p.ID, Group: p.Group, DesiredStatus: restart.DesiredRun})
	}
	for _, s := range rec.Surge {
		if _, ok := counts[s.Group]; ok && s.From > 0 {
			counts[s.Group] = s.From
		}
	}
	job := &restart.Job{ID: rec.JobID, Namespace: rec.Namespace, Type: rec.JobType}
	for _, g := range order {
		job.Groups = append(job.Groups, restart.Group{Name: g, Count: counts[g]})
	}
	return job, allocs
}

// valueAt is the step function's value at t (0 before its first step).
func valueAt(steps []tlStep, t time.Time) int {
	v := 0
	for _, s := range steps {
		if s.At.After(t) {
			break
		}
		v = s.Out
	}
	return v
}

// bucketPeaks aggregates steps into buckets of tlBudgetBucket units across the chart, each
// holding the most out of service at any time within it; it returns one step per run of
// equal buckets (X only). A change that lasted less than a bucket still shows.
func bucketPeaks(steps []tlStep, sc tlScale, end time.Time) []tlStep {
	n := (tlChartWidth + tlBudgetBucket - 1) / tlBudgetBucket
	peaks := make([]int, n)
	bucket := func(x int) int { return min(max((x-tlLabelWidth)/tlBudgetBucket, 0), n-1) }
	endX := sc.x(end)
	for i, s := range steps {
		to := endX
		if i+1 < len(steps) {
			to = steps[i+1].X
		}
		if s.Out == 0 {
			continue
		}
		for b := bucket(s.X); b <= bucket(max(to-1, s.X)); b++ {
			peaks[b] = max(peaks[b], s.Out)
		}
	}
	var out []tlStep
	for b, v := range peaks {
		if len(out) == 0 || out[len(out)-1].Out != v {
			out = append(out, tlStep{X: tlLabelWidth + b*tlBudgetBucket, Out: v})
		}
	}
	return out
}

// areaPath draws steps as a filled step area over the baseline, from the first step above
// zero to the end of the last.
func areaPath(steps []tlStep, yOf func(int) int, base int) string {
	first := slices.IndexFunc(steps, func(s tlStep) bool { return s.Out > 0 })
	if first < 0 {
		return ""
	}
	last := len(steps) - 1
	for steps[last].Out == 0 {
		last--
	}
	var b strings.Builder
	fmt.Fprintf(&b, "M%d %d", steps[first].X, base)
	for i := first; i <= last; i++ {
		right := tlLabelWidth + tlChartWidth
		if i+1 < len(steps) {
			right = steps[i+1].X
		}
		b.WriteString("V" + strconv.Itoa(yOf(steps[i].Out)) + "H" + strconv.Itoa(right))
	}
	fmt.Fprintf(&b, "V%dZ", base)
	return b.String()
}

// linePath draws the budget as a step line from its first step to end.
func linePath(steps []tlStep, sc tlScale, end time.Time, yOf func(int) int) string {
	if len(steps) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "M%d %d", steps[0].X, yOf(steps[0].Out))
	for _, s := range steps[1:] {
		fmt.Fprintf(&b, "H%dV%d", s.X, yOf(s.Out))
	}
	fmt.Fprintf(&b, "H%d", max(sc.x(end), steps[len(steps)-1].X+2))
	return b.String()
}
