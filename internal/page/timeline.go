package page

import (
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// The timeline of a restart, drawn as SVG: a lane per batch (the batch's span, from its
// first restart request to its last allocation's end, with its counts), a lane per group
// with its availability budget over time (budget.go), above one row per
// allocation (a bar from the restart request to the tasks running again, then the health
// gate until healthy, or failed). The batch lane stays in view; the allocation rows scroll,
// so a restart of 1,000 allocations stays readable (see docs).

// Layout of the drawing, in SVG user units (the SVG scales to the page's width).
const (
	tlLabelWidth = 170
	tlChartWidth = 780
	tlRowHeight  = 14
	tlAxisHeight = 18
	tlMaxTicks   = 8
)

type timeline struct {
	Width        int
	AxisY        int
	BatchHeight  int // height of the batch lanes' drawing, axis included
	AllocHeight  int // height of the allocation rows' drawing
	Ticks        []tlTick
	Batches      []tlBatch
	Rows         []tlRow
	BatchStarts  []int // x of each batch's first request, drawn across the allocation rows
	Summary      string
	InFlight     bool // the restart has not ended: open bars run to now
	LabelWidth   int
	ChartRight   int
	HasAllocRows bool
	// Budget is one lane per targeted group: its allocations out of service over time
	// against its availability budget (budget.go), drawn between the batch lanes and
	// the allocation rows; BudgetHeight is that drawing's height.
	Budget       []tlBudgetLane
	BudgetHeight int
}

type tlTick struct {
	X     int
	Label string
}

type tlBatch struct {
	N                     int
	Y, X, W               int
	Label, Title, Class   string
	Done, Failed, Skipped int
	// Gate is the batch's metric gates, drawn in its lane after it (nil: none).
	Gate *tlGate
}

// tlGate is a batch's metric gates: from their start to their end (or now), classed by
// their outcome, their measurements on hover.
type tlGate struct {
	Y, X, W      int
	Class, Title string
}

// gateSpan lays out the gate run g of the batch drawn at y.
func gateSpan(g restart.GateRun, y int, sc tlScale, now time.Time) *tlGate {
	end := g.Ended
	if end.IsZero() {
		end = now
	}
	title := fmt.Sprintf("Gates after batch %d: %s", g.Batch, g.Outcome)
	if g.Reason != "" {
		title += ": " + g.Reason
	}
	for _, m := range g.Measurements {
		title += fmt.Sprintf("\n%s %s", m.At.UTC().Format("15:04:05"), m.Gate)
		switch m.Verdict {
		case gate.VerdictError:
			title += " error: " + m.Error
		case gate.VerdictNoData:
			title += " no data"
		default:
			title += fmt.Sprintf(" %s %s", gate.FormatValue(m.Value), m.Verdict)
		}
	}
	return &tlGate{Y: y, X: sc.x(g.Started), W: sc.width(g.Started, end), Class: string(g.Outcome), Title: title}
}

type tlRow struct {
	Y       int
	AllocID string
	Label   string
	State   restart.AllocState
	Bars    []tlBar
	Mark    *tlMark // the end of a failed or skipped allocation
}

type tlBar struct {
	X, W  int
	Class string // "restarting" (request to running again), "gate" (health gate), plus "open" while in flight
	Title string
}

type tlMark struct {
	X     int
	Class string // failed, skipped
	Title string
}

// tlScale maps times of the restart onto the chart's x axis.
type tlScale struct {
	start time.Time
	span  time.Duration
}

func (s tlScale) x(t time.Time) int {
	if t.Before(s.start) {
		t = s.start
	}
	return tlLabelWidth + int(float64(tlChartWidth)*float64(t.Sub(s.start))/float64(s.span))
}

// width is the drawn width of [from, to], at least 2 units so that a short span shows.
func (s tlScale) width(from, to time.Time) int {
	return max(s.x(to)-s.x(from), 2)
}

// buildTimeline lays out rec's timeline at now (the end of bars still in flight).
func buildTimeline(rec *restart.Record, now time.Time) timeline {
	sc := timelineScale(rec, now)
	runningAgain := firstEventTimes(rec.Events, restart.EventAllocHealth)
	tl := timeline{Width: tlLabelWidth + tlChartWidth + 30, AxisY: tlAxisHeight - 6, LabelWidth: tlLabelWidth,
		ChartRight: tlLabelWidth + tlChartWidth, InFlight: !rec.Status.Terminal()}
	tl.Ticks = timelineTicks(sc)
	end := now
	if rec.Status.Terminal() && !rec.EndTime.IsZero() {
		end = rec.EndTime
	}
	batches := map[int]*tlBatch{}
	for i, p := range rec.Allocs {
		row := allocRow(p, sc, runningAgain[p.ID], end)
		row.Y = tlAxisHeight + i*tlRowHeight
		tl.Rows = append(tl.Rows, row)
		addToBatch(batches, p, sc, end)
	}
	tl.HasAllocRows = len(tl.Rows) > 0
	tl.AllocHeight = tlAxisHeight + len(tl.Rows)*tlRowHeight + 4
	for n := 1; n <= rec.Batches || batches[n] != nil; n++ {
		b := batches[n]
		if b == nil {
			continue
		}
		b.Y = tlAxisHeight + len(tl.Batches)*tlRowHeight
		b.Label = fmt.Sprintf("batch %d", n)
		b.Title = fmt.Sprintf("Batch %d: %d done, %d failed, %d skipped", n, b.Done, b.Failed, b.Skipped)
		if b.W > 0 {
			tl.BatchStarts = append(tl.BatchStarts, b.X)
		}
		if g := rec.GateRunOf(n); g != nil {
			b.Gate = gateSpan(*g, b.Y, sc, end)
		}
		tl.Batches = append(tl.Batches, *b)
	}
	tl.BatchHeight = tlAxisHeight + len(tl.Batches)*tlRowHeight + 4
	tl.Budget = budgetLanes(rec, sc, end, 4)
	tl.BudgetHeight = 4 + len(tl.Budget)*tlBudgetLaneHeight + 4
	tl.Summary = fmt.Sprintf("Timeline of %d allocations in %d batches over %s", len(rec.Allocs), len(tl.Batches), sc.span.Round(time.Second))
	return tl
}

// timelineScale spans the restart from its start (its creation before a driver started it)
// to its end, or now while it runs.
func timelineScale(rec *restart.Record, now time.Time) tlScale {
	start := rec.StartTime
	if start.IsZero() {
		start = rec.CreateTime
	}
	for _, p := range rec.Allocs {
		if !p.StartTime.IsZero() && p.StartTime.Before(start) {
			start = p.StartTime
		}
	}
	end := now
	if rec.Status.Terminal() && !rec.EndTime.IsZero() {
		end = rec.EndTime
	}
	for _, p := range rec.Allocs {
		if p.EndTime.After(end) {
			end = p.EndTime
		}
	}
	span := end.Sub(start)
	if span < time.Second {
		span = time.Second
	}
	return tlScale{start: start, span: span}
}

// timelineTicks places at most tlMaxTicks+1 ticks on a round step, labelled with the time
// since the restart's start.
func timelineTicks(sc tlScale) []tlTick {
	steps := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}
	// Beyond the longest step (a record whose times are far apart, or unset: a span of
	// centuries), whole days, as many as keep the ticks within tlMaxTicks.
	day := steps[len(steps)-1]
	step := (sc.span/tlMaxTicks/day + 1) * day
	for _, s := range steps {
		if sc.span/s <= tlMaxTicks {
			step = s
			break
		}
	}
	var out []tlTick
	// Counted, not summed: a sum near the longest span a Duration holds would wrap around.
	for i := range sc.span/step + 1 {
		d := i * step
		out = append(out, tlTick{X: sc.x(sc.start.Add(d)), Label: offsetLabel(d)})
	}
	return out
}

// offsetLabel words a tick's time since the start as briefly as its step allows: +30s,
// +1m30s, +2m, +1h, +1h30m.
func offsetLabel(d time.Duration) string {
	h, m, sec := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	switch {
	case h > 0 && m > 0:
		return fmt.Sprintf("+%dh%dm", h, m)
	case h > 0:
		return fmt.Sprintf("+%dh", h)
	case m > 0 && sec > 0:
		return fmt.Sprintf("+%dm%ds", m, sec)
	case m > 0:
		return fmt.Sprintf("+%dm", m)
	}
	return fmt.Sprintf("+%ds", sec)
}

// firstEventTimes maps each allocation to the time of its first event of type t. The first
// health-gate event of an allocation is when its tasks ran again and the gate began (the
// event log is bounded: older allocations may have lost theirs, and then draw one bar).
func firstEventTimes(events []restart.Event, t restart.EventType) map[string]time.Time {
	out := map[string]time.Time{}
	for _, ev := range events {
		if ev.Type != t || ev.AllocID == "" {
			continue
		}
		if _, seen := out[ev.AllocID]; !seen {
			out[ev.AllocID] = ev.Time
		}
	}
	return out
}

// allocRow draws one allocation: nothing until a driver took it up, then its bars.
func allocRow(p restart.AllocProgress, sc tlScale, runningAgain, now time.Time) tlRow {
	row := tlRow{AllocID: p.ID, State: p.State, Label: fmt.Sprintf("%s %s", short(p.ID), p.Name)}
	if p.State == restart.AllocSkipped {
		at := p.EndTime
		if at.IsZero() {
			at = sc.start
		}
		row.Mark = &tlMark{X: sc.x(at), Class: "skipped", Title: "skipped: " + p.Error}
		return row
	}
	if p.StartTime.IsZero() {
		return row // pending: not taken up yet
	}
	end, open := p.EndTime, p.EndTime.IsZero()
	if open {
		end = now
	}
	openClass := ""
	if open {
		openClass = " open"
	}
	mid := runningAgain
	if mid.IsZero() || mid.Before(p.StartTime) || mid.After(end) {
		// No record of when the tasks ran again (health none, or an event log that dropped
		// it): one bar, drawn as done once the allocation is.
		class := "restarting"
		if p.State == restart.AllocDone {
			class = "gate"
		}
		row.Bars = append(row.Bars, tlBar{X: sc.x(p.StartTime), W: sc.width(p.StartTime, end), Class: class + openClass + endClass(p.State),
			Title: fmt.Sprintf("%s: restart requested %s, %s", short(p.ID), stamp(p.StartTime), allocOutcome(p, end, open))})
	} else {
		row.Bars = append(row.Bars,
			tlBar{X: sc.x(p.StartTime), W: sc.width(p.StartTime, mid), Class: "restarting",
				Title: fmt.Sprintf("%s: restart requested %s; tasks running again %s", short(p.ID), stamp(p.StartTime), stamp(mid))},
			tlBar{X: sc.x(mid), W: sc.width(mid, end), Class: "gate" + openClass + endClass(p.State),
				Title: fmt.Sprintf("%s: health gate from %s, %s", short(p.ID), stamp(mid), allocOutcome(p, end, open))})
	}
	if p.State == restart.AllocFailed {
		row.Mark = &tlMark{X: sc.x(end), Class: "failed", Title: "failed: " + p.Error}
	}
	return row
}

func endClass(s restart.AllocState) string {
	if s == restart.AllocFailed {
		return " failed"
	}
	return ""
}

func allocOutcome(p restart.AllocProgress, end time.Time, open bool) string {
	switch {
	case open && p.Waiting != "":
		return "waiting for " + p.Waiting
	case open:
		return string(p.State)
	case p.State == restart.AllocFailed:
		return "failed " + stamp(end) + ": " + p.Error
	}
	return "healthy " + stamp(end)
}

// addToBatch widens allocation p's batch to cover p's span and counts its outcome.
func addToBatch(batches map[int]*tlBatch, p restart.AllocProgress, sc tlScale, now time.Time) {
	b := batches[p.Batch]
	if b == nil {
		b = &tlBatch{N: p.Batch, Class: "batch"}
		batches[p.Batch] = b
	}
	switch p.State {
	case restart.AllocDone:
		b.Done++
	case restart.AllocFailed:
		b.Failed++
		b.Class = "batch failed"
	case restart.AllocSkipped:
		b.Skipped++
	}
	if p.StartTime.IsZero() {
		return
	}
	end := p.EndTime
	if end.IsZero() {
		end = now
	}
	x1, x2 := sc.x(p.StartTime), sc.x(end)
	if b.W == 0 {
		b.X, b.W = x1, max(x2-x1, 2)
		return
	}
	right := max(b.X+b.W, x2)
	b.X = min(b.X, x1)
	b.W = max(right-b.X, 2)
}

// stamp is an absolute time as the page shows it on hover.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
