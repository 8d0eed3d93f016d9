package page

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// budgetRecord is a restart of two groups at t0+100s: batch 1 takes web[0] and api[0],
// batch 2 web[1] (requested as web[0] became healthy) and web[2], batch 3 api[1], still in
// flight; web[2] failed, web[3] was skipped.
func budgetRecord(t0 time.Time) *restart.Record {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	return &restart.Record{
		ID: "rec-budget", JobID: "shop", JobType: "service", Status: restart.StatusRunning, StartTime: t0, CreateTime: t0, Batches: 3,
		Allocs: []restart.AllocProgress{
			{ID: "aaaaaaaa-1", Name: "shop.web[0]", Group: "web", Batch: 1, State: restart.AllocDone, StartTime: at(0), EndTime: at(20)},
			{ID: "bbbbbbbb-1", Name: "shop.api[0]", Group: "api", Batch: 1, State: restart.AllocDone, StartTime: at(0), EndTime: at(30)},
			{ID: "aaaaaaaa-2", Name: "shop.web[1]", Group: "web", Batch: 2, State: restart.AllocDone, StartTime: at(20), EndTime: at(50)},
			{ID: "aaaaaaaa-3", Name: "shop.web[2]", Group: "web", Batch: 2, State: restart.AllocFailed, StartTime: at(30), EndTime: at(60), Error: "check http failing"},
			{ID: "aaaaaaaa-4", Name: "shop.web[3]", Group: "web", Batch: 2, State: restart.AllocSkipped, EndTime: at(30), Error: "allocation is stopped"},
			{ID: "bbbbbbbb-2", Name: "shop.api[1]", Group: "api", Batch: 3, State: restart.AllocWaiting, StartTime: at(70)},
		},
	}
}

func TestBudgetLanes(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := func(pairs ...int) string { // seconds since t0 and value, as tlStep prints them
		var out []string
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, tlStep{At: t0.Add(time.Duration(pairs[i]) * time.Second), Out: pairs[i+1]}.String())
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	// Out of service, whatever the budget: web's web[0] ends as web[1] starts (never both
	// out), the failed web[2] counts until it failed, the skipped web[3] never; api's
	// api[1] is out until now.
	wantOut := map[string]string{"web": steps(0, 1, 30, 2, 50, 1, 60, 0), "api": steps(0, 1, 30, 0, 70, 1, 100, 0)}
	type lane struct {
		budgets          string
		peak, peakBudget int
		over             bool
	}
	tests := []struct {
		name   string
		spec   restart.Spec
		surge  []restart.SurgeGroup
		groups map[string]lane
	}{
		{"no -max-unavailable: each batch's size, from its start", restart.Spec{}, nil, map[string]lane{
			"web": {steps(0, 2, 20, 3), 2, 3, false}, // batches 1 and 2: 2 and 3 allocations
			"api": {steps(0, 2, 70, 1), 1, 2, false}, // batches 1 and 3: 2 and 1
		}},
		{"-max-unavailable 50% of the planned count, or of the count before a surge", restart.Spec{MaxUnavailable: &restart.BatchSize{N: 50, Percent: true}},
			[]restart.SurgeGroup{{Group: "web", From: 8, To: 9, Phase: restart.SurgeDown}}, map[string]lane{
				"web": {steps(0, 4), 2, 4, false}, // 50% of 8
				"api": {steps(0, 1), 1, 1, false}, // 50% of its 2 planned
			}},
		{"-max-unavailable 1: web went over", restart.Spec{MaxUnavailable: &restart.BatchSize{N: 1}}, nil, map[string]lane{
			"web": {steps(0, 1), 2, 1, true},
			"api": {steps(0, 1), 1, 1, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := budgetRecord(t0)
			rec.Spec, rec.Surge = tt.spec, tt.surge
			tl := buildTimeline(rec, t0.Add(100*time.Second))
			if len(tl.Budget) != 2 || tl.Budget[0].Group != "api" || tl.Budget[1].Group != "web" {
				t.Fatalf("lanes = %+v, want api then web", tl.Budget)
			}
			for _, l := range tl.Budget {
				want := tt.groups[l.Group]
				if got := fmt.Sprint(l.Steps); got != wantOut[l.Group] {
					t.Errorf("%s out of service = %s, want %s", l.Group, got, wantOut[l.Group])
				}
				if got := fmt.Sprint(l.Budgets); got != want.budgets {
					t.Errorf("%s budget = %s, want %s", l.Group, got, want.budgets)
				}
				if l.Peak != want.peak || l.PeakBudget != want.peakBudget || l.Over != want.over {
					t.Errorf("%s peak %d / budget %d (over %v), want %d / %d (over %v)", l.Group, l.Peak, l.PeakBudget, l.Over, want.peak, want.peakBudget, want.over)
				}
				if label := fmt.Sprintf("out of service %d / budget %d", want.peak, want.peakBudget); l.PeakLabel != label {
					t.Errorf("%s label %q, want %q", l.Group, l.PeakLabel, label)
				}
				for _, s := range l.Steps {
					if wantX := tlLabelWidth + tlChartWidth*int(s.At.Sub(t0)/time.Second)/100; s.X != wantX {
						t.Errorf("%s step at %s drawn at x %d, want %d", l.Group, s.At, s.X, wantX)
					}
				}
			}
		})
	}
}

// A change shorter than a bucket is still drawn (the bucket keeps its peak), and equal
// buckets make one step.
func TestBucketPeaksKeepShortSpikes(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sc := tlScale{start: t0, span: time.Hour}
	at := func(d time.Duration) tlStep { return tlStep{At: t0.Add(d), X: sc.x(t0.Add(d))} }
	spike, after := at(30*time.Minute), at(30*time.Minute+time.Second) // one second of an hour: under a unit
	spike.Out, after.Out = 3, 0
	got := bucketPeaks([]tlStep{spike, after}, sc, t0.Add(time.Hour))
	var xs []string
	for _, s := range got {
		xs = append(xs, fmt.Sprintf("%d:%d", s.X, s.Out))
	}
	b := tlLabelWidth + (spike.X-tlLabelWidth)/tlBudgetBucket*tlBudgetBucket
	if want := fmt.Sprintf("[%d:0 %d:3 %d:0]", tlLabelWidth, b, b+tlBudgetBucket); fmt.Sprint(xs) != want {
		t.Errorf("buckets = %v, want %s", xs, want)
	}
}

// At 1,000 allocations (1,000 batches of one, two groups) each lane is a fixed handful of
// SVG elements whose paths have at most one step per bucket.
func TestBudgetLanesOfAThousandAllocations(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &restart.Record{ID: "big", JobType: "service", Status: restart.StatusSucceeded, StartTime: t0, EndTime: t0.Add(3000 * time.Second), Batches: 1000}
	for i := range 1000 {
		start := t0.Add(time.Duration(i) * 3 * time.Second)
		rec.Allocs = append(rec.Allocs, restart.AllocProgress{ID: fmt.Sprintf("%08d-x", i), Group: []string{"web", "api"}[i%2], Batch: i + 1,
			State: restart.AllocDone, StartTime: start, EndTime: start.Add(7 * time.Second)})
	}
	tl := buildTimeline(rec, t0.Add(2*time.Hour))
	if len(tl.Budget) != 2 {
		t.Fatalf("lanes = %d, want 2", len(tl.Budget))
	}
	for _, l := range tl.Budget {
		// Each group's allocations start every 6 s and take 7 s: two out at once, against
		// a budget of one (the batch size).
		if l.Peak != 2 || l.PeakBudget != 1 || !l.Over || len(l.Budgets) != 1 {
			t.Errorf("%s: peak %d / budget %d over %v, budget steps %v; want 2 / 1 over, one budget", l.Group, l.Peak, l.PeakBudget, l.Over, l.Budgets)
		}
		if n := strings.Count(l.Area, "H"); n > tlChartWidth/tlBudgetBucket+1 {
			t.Errorf("%s: area of %d steps, want at most one per bucket", l.Group, n)
		}
	}
	html, err := renderString(restartPage, "timeline", tl)
	if err != nil {
		t.Fatal(err)
	}
	svg := regexp.MustCompile(`(?s)<svg[^>]*id="timeline-budget".*?</svg>`).FindString(html)
	if svg == "" {
		t.Fatal("no budget drawing")
	}
	if n := strings.Count(svg, "<") - strings.Count(svg, "</"); n > 2*12+len(tl.Ticks)+3 {
		t.Errorf("budget drawing has %d elements, want a bounded handful per lane", n)
	}
	for _, want := range []string{`role="img" aria-label="group web: out of service 2 / budget 1"`, `<desc>Availability budget of group api`, `class="tl-budget over"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("budget drawing lacks %s", want)
		}
	}
}
