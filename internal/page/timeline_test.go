package page

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// timelineRecord is a restart of three allocations in batches of one, 100 s long at t0+100s:
// the first done (tasks running again at +10s, healthy at +20s), the second failed in its
// health gate, the third still waiting.
func timelineRecord(t0 time.Time) *restart.Record {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	return &restart.Record{
		ID: "rec-0000-1111", Status: restart.StatusRunning, StartTime: t0, CreateTime: t0, Batches: 4,
		Allocs: []restart.AllocProgress{
			{ID: "aaaaaaaa-1", Name: "web[0]", Batch: 1, State: restart.AllocDone, StartTime: at(0), EndTime: at(20)},
			{ID: "bbbbbbbb-2", Name: "web[1]", Batch: 2, State: restart.AllocFailed, StartTime: at(30), EndTime: at(60), Error: "check http failing"},
			{ID: "cccccccc-3", Name: "web[2]", Batch: 3, State: restart.AllocWaiting, StartTime: at(70), Waiting: "the tasks to run again"},
			{ID: "dddddddd-4", Name: "web[3]", Batch: 4, State: restart.AllocSkipped, EndTime: at(70), Error: "allocation is stopped"},
		},
		Events: []restart.Event{
			{Type: restart.EventAllocHealth, AllocID: "aaaaaaaa-1", Time: at(10)},
			{Type: restart.EventAllocHealth, AllocID: "aaaaaaaa-1", Time: at(15)}, // a later kind of wait: not the start of the gate
			{Type: restart.EventAllocHealth, AllocID: "bbbbbbbb-2", Time: at(40)},
		},
	}
}

func TestBuildTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := timelineRecord(t0)
	tl := buildTimeline(rec, t0.Add(100*time.Second))
	x := func(s int) int { return tlLabelWidth + tlChartWidth*s/100 }

	type bar struct {
		X, W  int
		Class string
	}
	bars := func(r tlRow) []bar {
		var out []bar
		for _, b := range r.Bars {
			out = append(out, bar{b.X, b.W, b.Class})
		}
		return out
	}
	tests := []struct {
		name string
		row  tlRow
		want []bar
		mark string
	}{
		{"done: request to running again, then the gate to healthy", tl.Rows[0],
			[]bar{{x(0), x(10) - x(0), "restarting"}, {x(10), x(20) - x(10), "gate"}}, ""},
		{"failed in the gate", tl.Rows[1],
			[]bar{{x(30), x(40) - x(30), "restarting"}, {x(40), x(60) - x(40), "gate failed"}}, "failed"},
		{"in flight: one open bar to now", tl.Rows[2],
			[]bar{{x(70), x(100) - x(70), "restarting open"}}, ""},
		{"skipped: a mark only", tl.Rows[3], nil, "skipped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bars(tt.row); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("bars = %v, want %v", got, tt.want)
			}
			mark := ""
			if tt.row.Mark != nil {
				mark = tt.row.Mark.Class
			}
			if mark != tt.mark {
				t.Errorf("mark = %q, want %q", mark, tt.mark)
			}
		})
	}
	if len(tl.Batches) != 4 {
		t.Fatalf("batch lanes = %d, want 4", len(tl.Batches))
	}
	if b := tl.Batches[1]; b.X != x(30) || b.W != x(60)-x(30) || b.Failed != 1 || !strings.Contains(b.Class, "failed") {
		t.Errorf("batch 2 lane = %+v, want its span from +30s to +60s marked failed", b)
	}
	if b := tl.Batches[3]; b.W != 0 || b.Skipped != 1 {
		t.Errorf("batch 4 lane = %+v, want no span and one skipped", b)
	}
	if len(tl.BatchStarts) != 3 {
		t.Errorf("batch start lines = %v, want one per started batch", tl.BatchStarts)
	}
	if got := len(tl.Ticks); got < 2 || got > tlMaxTicks+1 || tl.Ticks[0].Label != "+0s" {
		t.Errorf("ticks = %+v", tl.Ticks)
	}
}

// A restart's timeline stays a fixed row height however many allocations it has: at 1,000
// the allocation rows scroll (the page frames them) and the batch lanes stay one per batch.
func TestTimelineOfAThousandAllocations(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &restart.Record{ID: "big", Status: restart.StatusSucceeded, StartTime: t0, EndTime: t0.Add(time.Hour), Batches: 10}
	for i := range 1000 {
		start := t0.Add(time.Duration(i/100) * 6 * time.Minute)
		rec.Allocs = append(rec.Allocs, restart.AllocProgress{ID: fmt.Sprintf("%08d-x", i), Batch: i/100 + 1, State: restart.AllocDone,
			StartTime: start, EndTime: start.Add(time.Minute)})
	}
	tl := buildTimeline(rec, t0.Add(2*time.Hour))
	if len(tl.Rows) != 1000 || tl.AllocHeight != tlAxisHeight+1000*tlRowHeight+4 {
		t.Errorf("rows = %d, height %d", len(tl.Rows), tl.AllocHeight)
	}
	if len(tl.Batches) != 10 || tl.Batches[9].Done != 100 {
		t.Errorf("batch lanes = %d (last %+v), want 10 of 100 each", len(tl.Batches), tl.Batches[len(tl.Batches)-1])
	}
	if last := tl.Rows[999].Bars; len(last) != 1 || last[0].X+last[0].W > tl.ChartRight {
		t.Errorf("last row's bars %+v pass the chart's right edge %d", last, tl.ChartRight)
	}
	html, err := renderString(restartPage, "timeline", tl)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(html, `class="tl-row"`); n != 1000 {
		t.Errorf("rendered %d rows, want 1000", n)
	}
	if !strings.Contains(html, `class="tl-allocs" tabindex="0"`) {
		t.Error("the allocation rows are not in their scrolling frame, reachable by keyboard")
	}
}

// A batch's metric gates are drawn in its lane from their start to their end (or now),
// classed by their outcome, their measurements on hover.
func TestTimelineDrawsMetricGates(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rec := timelineRecord(t0)
	rec.GateRuns = []restart.GateRun{
		{Batch: 1, Started: at(20), Ended: at(28), Outcome: restart.GatePassed,
			Measurements: []gate.Measurement{{Gate: "errors", At: at(25), Value: 0.01, Verdict: gate.VerdictPass}}},
		{Batch: 2, Started: at(60), Outcome: restart.GateMeasuring,
			Measurements: []gate.Measurement{{Gate: "errors", At: at(62), Verdict: gate.VerdictError, Error: "connection refused"}}},
	}
	tl := buildTimeline(rec, at(100))
	x := func(s int) int { return tlLabelWidth + tlChartWidth*s/100 }
	g1, g2 := tl.Batches[0].Gate, tl.Batches[1].Gate
	if g1 == nil || g1.X != x(20) || g1.W != x(28)-x(20) || g1.Class != "passed" || !strings.Contains(g1.Title, "errors 0.01 pass") || g1.Y != tl.Batches[0].Y {
		t.Errorf("batch 1's gates = %+v, want passed from +20s to +28s in its lane", g1)
	}
	if g2 == nil || g2.W != x(100)-x(60) || g2.Class != "measuring" || !strings.Contains(g2.Title, "error: connection refused") {
		t.Errorf("batch 2's gates = %+v, want measuring from +60s to now with the error on hover", g2)
	}
	if tl.Batches[2].Gate != nil {
		t.Errorf("batch 3 has no gates yet: %+v", tl.Batches[2].Gate)
	}
}
