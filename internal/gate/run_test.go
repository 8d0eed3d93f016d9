package gate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock moves only when Run sleeps (or a query takes time): a gate's minutes take none.
type fakeClock struct {
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return true
}

// fakeQuerier answers each query with the next of its answers (the last one repeats), and
// keeps what it was asked.
type fakeQuerier struct {
	clock   *fakeClock
	answers map[string][]answer
	took    time.Duration // how long each query takes on the clock
	calls   []call
}

type answer struct {
	s   Sample
	err error
}

type call struct {
	promql string
	at     time.Time
}

func (q *fakeQuerier) Query(ctx context.Context, promql string, at time.Time) (Sample, error) {
	q.calls = append(q.calls, call{promql, at})
	q.clock.now = q.clock.now.Add(q.took)
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	as, ok := q.answers[promql]
	if !ok {
		return Sample{}, fmt.Errorf("the fake has no answer for %s", promql)
	}
	a := as[0]
	if len(as) > 1 {
		q.answers[promql] = as[1:]
	}
	return a.s, a.err
}

func val(vs ...float64) []answer {
	as := make([]answer, len(vs))
	for i, v := range vs {
		as[i] = answer{s: Sample{Value: v}}
	}
	return as
}

func newFake(answers map[string][]answer) (*fakeClock, *fakeQuerier) {
	c := &fakeClock{now: t0}
	return c, &fakeQuerier{clock: c, answers: answers}
}

// recorder keeps what Run hands it.
type recorder struct {
	ms   []Measurement
	fail func(n int) error // the error for the n-th (1-based) measurement, if any
}

func (r *recorder) record(m Measurement) error {
	if r.fail != nil {
		if err := r.fail(len(r.ms) + 1); err != nil {
			return err
		}
	}
	r.ms = append(r.ms, m)
	return nil
}

func mustParse(t *testing.T, s string) Spec {
	t.Helper()
	spec, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func policy(f func(*Policy)) Policy {
	p := DefaultPolicy()
	if f != nil {
		f(&p)
	}
	return p
}

func TestRunWaitsDelayThenMeasuresCountTimesIntervalApart(t *testing.T) {
	g := mustParse(t, `errors: rate(x{job="{{job}}",b="{{batch}}"}[30s]) < 0.02`)
	clk, q := newFake(map[string][]answer{`rate(x{job="web",b="2"}[30s])`: val(0.01, 0.0, 0.019)})
	var rec recorder
	p := policy(func(p *Policy) { p.Delay = 30 * time.Second })
	res, err := Run(context.Background(), q, []Spec{g}, Vars{Job: "web", Batch: 2}, p, clk, nil, rec.record)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || res.Failed != "" || len(res.Gates) != 1 || res.Gates[0].State != Passed || res.Gates[0].Measured != 3 {
		t.Fatalf("result %+v", res)
	}
	if want := []time.Duration{30 * time.Second, 10 * time.Second, 10 * time.Second}; !slices.Equal(clk.sleeps, want) {
		t.Fatalf("slept %v, want %v", clk.sleeps, want)
	}
	wantAt := []time.Time{t0.Add(30 * time.Second), t0.Add(40 * time.Second), t0.Add(50 * time.Second)}
	if len(rec.ms) != 3 || len(q.calls) != 3 {
		t.Fatalf("recorded %d measurements after %d queries, want 3", len(rec.ms), len(q.calls))
	}
	for i, m := range rec.ms {
		if !m.At.Equal(wantAt[i]) || !q.calls[i].at.Equal(wantAt[i]) || m.Gate != "errors" || m.Query != `rate(x{job="web",b="2"}[30s])` || m.Verdict != VerdictPass {
			t.Errorf("measurement %d: %+v (queried at %s), want at %s", i, m, q.calls[i].at, wantAt[i])
		}
	}
	if rec.ms[0].Value != 0.01 || rec.ms[2].Value != 0.019 {
		t.Errorf("values %v, %v", rec.ms[0].Value, rec.ms[2].Value)
	}
}

func TestRunKeepsItsCadenceWhenQueriesAreSlow(t *testing.T) {
	g := mustParse(t, "a: x < 1")
	clk, q := newFake(map[string][]answer{"x": val(0)})
	q.took = 3 * time.Second
	var rec recorder
	if _, err := Run(context.Background(), q, []Spec{g}, Vars{}, policy(nil), clk, nil, rec.record); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{7 * time.Second, 7 * time.Second}; !slices.Equal(clk.sleeps, want) {
		t.Fatalf("slept %v, want %v: the next tick is an interval after the last one started", clk.sleeps, want)
	}
}

func TestRunMeasuresAllGatesAtOneTickAndStopsAtTheFirstFailure(t *testing.T) {
	a := mustParse(t, "a: qa < 1")
	b := mustParse(t, "b: qb < 1")
	c := mustParse(t, "c: qc > 0")
	clk, q := newFake(map[string][]answer{"qa": val(0), "qb": val(0, 5), "qc": val(1)})
	var rec recorder
	res, err := Run(context.Background(), q, []Spec{a, b, c}, Vars{}, policy(nil), clk, nil, rec.record)
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || res.Failed != `gate "b": 1 of 2 measurements failed (limit 0): 5 not < 1` {
		t.Fatalf("result %+v", res)
	}
	if res.Gates[0].State != Pending || res.Gates[0].Measured != 2 || res.Gates[1].State != Failed || res.Gates[2].State != Pending {
		t.Fatalf("gates %+v", res.Gates)
	}
	if len(q.calls) != 6 || len(rec.ms) != 6 {
		t.Fatalf("%d queries, %d recorded; want 6: two ticks of three gates, then none", len(q.calls), len(rec.ms))
	}
	for i := range 3 {
		if !q.calls[i].at.Equal(t0) || !q.calls[3+i].at.Equal(t0.Add(10*time.Second)) {
			t.Fatalf("calls %+v: each tick queries every gate at its own moment", q.calls)
		}
	}
}

func TestRunNamesTheFirstGateOfSeveralThatFail(t *testing.T) {
	a := mustParse(t, "a: qa < 1")
	b := mustParse(t, "b: qb < 1")
	clk, q := newFake(map[string][]answer{"qa": val(2), "qb": val(3)})
	res, err := Run(context.Background(), q, []Spec{b, a}, Vars{}, policy(nil), clk, nil, (&recorder{}).record)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Failed, `gate "b":`) || res.Gates[1].State != Failed {
		t.Fatalf("result %+v", res)
	}
}

func TestRunOnlyMeasuresPendingGates(t *testing.T) {
	fast := mustParse(t, "fast: qf < 1")
	slow := mustParse(t, "slow: qs < 1")
	// slow's first two queries fail: it needs two more ticks than fast.
	clk, q := newFake(map[string][]answer{"qf": val(0), "qs": {{err: errors.New("timeout")}, {err: errors.New("timeout")}, {s: Sample{Value: 0}}}})
	var rec recorder
	res, err := Run(context.Background(), q, []Spec{fast, slow}, Vars{}, policy(nil), clk, nil, rec.record)
	if err != nil || !res.Passed {
		t.Fatalf("result %+v, %v", res, err)
	}
	counts := map[string]int{}
	for _, c := range q.calls {
		counts[c.promql]++
	}
	if counts["qf"] != 3 || counts["qs"] != 5 {
		t.Fatalf("queries %v, want qf 3 and qs 5", counts)
	}
	if rec.ms[3].Verdict != VerdictError || rec.ms[3].Error != "timeout" {
		t.Fatalf("an error is recorded as such: %+v", rec.ms[3])
	}
}

func TestRunRetriesErrorsToTheLimit(t *testing.T) {
	g := mustParse(t, "errors: x < 1")
	clk, q := newFake(map[string][]answer{"x": {{err: errors.New("querying Prometheus at http://p:9090: connection refused")}}})
	p := policy(func(p *Policy) { p.ErrorLimit = 2; p.Interval = 5 * time.Second })
	var rec recorder
	res, err := Run(context.Background(), q, []Spec{g}, Vars{}, p, clk, nil, rec.record)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != `gate "errors": 3 queries in a row failed (limit 2): querying Prometheus at http://p:9090: connection refused` {
		t.Fatalf("result %+v", res)
	}
	if len(q.calls) != 3 || !slices.Equal(clk.sleeps, []time.Duration{5 * time.Second, 5 * time.Second}) {
		t.Fatalf("%d queries, slept %v: errors are retried every interval", len(q.calls), clk.sleeps)
	}
}

func TestRunRecordsNoDataWithoutNaN(t *testing.T) {
	g := mustParse(t, "errors: x < 1")
	clk, q := newFake(map[string][]answer{"x": {{s: Sample{Value: math.NaN(), Warnings: []string{"no traffic"}}}}})
	var rec recorder
	res, err := Run(context.Background(), q, []Spec{g}, Vars{}, policy(nil), clk, nil, rec.record)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Failed, "no data") || len(rec.ms) != 1 || rec.ms[0].Verdict != VerdictNoData || rec.ms[0].Value != 0 || rec.ms[0].Warnings[0] != "no traffic" {
		t.Fatalf("result %+v, recorded %+v", res, rec.ms)
	}
}

func TestRunDryRunPassesAFailingGate(t *testing.T) {
	g := mustParse(t, "errors: x < 0.02")
	clk, q := newFake(map[string][]answer{"x": val(0.3)})
	res, err := Run(context.Background(), q, []Spec{g}, Vars{}, policy(func(p *Policy) { p.DryRun = true }), clk, nil, (&recorder{}).record)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || res.Failed != "" || res.Gates[0].WouldFail != `gate "errors": 1 of 1 measurement failed (limit 0): 0.3 not < 0.02` {
		t.Fatalf("result %+v", res)
	}
}

func TestRunStopsWhenRecordFails(t *testing.T) {
	g := mustParse(t, "errors: x < 1")
	clk, q := newFake(map[string][]answer{"x": val(0)})
	full := errors.New("disk full")
	rec := recorder{fail: func(n int) error {
		if n == 2 {
			return full
		}
		return nil
	}}
	_, err := Run(context.Background(), q, []Spec{g}, Vars{}, policy(nil), clk, nil, rec.record)
	if !errors.Is(err, full) || err.Error() != `recording a measurement of gate "errors": disk full` {
		t.Fatalf("err = %v", err)
	}
	if len(q.calls) != 2 || len(rec.ms) != 1 {
		t.Fatalf("%d queries and %d recorded after the record failed, want 2 and 1", len(q.calls), len(rec.ms))
	}
}

func TestRunResumesFromPriorMeasurements(t *testing.T) {
	g := mustParse(t, "errors: x < 1")
	p := policy(func(p *Policy) { p.Delay = time.Minute })
	pass := func(at time.Time) Measurement {
		return Measurement{Gate: "errors", At: at, Query: "x", Verdict: VerdictPass}
	}

	t.Run("counts on, an interval after the latest", func(t *testing.T) {
		clk, q := newFake(map[string][]answer{"x": val(0)})
		prior := []Measurement{pass(t0.Add(-15 * time.Second)), {Gate: "other", At: t0.Add(time.Hour)}, pass(t0.Add(-5 * time.Second))}
		var rec recorder
		res, err := Run(context.Background(), q, []Spec{g}, Vars{}, p, clk, prior, rec.record)
		if err != nil || !res.Passed {
			t.Fatalf("result %+v, %v", res, err)
		}
		if !slices.Equal(clk.sleeps, []time.Duration{5 * time.Second}) || len(q.calls) != 1 || len(rec.ms) != 1 {
			t.Fatalf("slept %v, %d queries, %d recorded: want no delay, one query 5s on", clk.sleeps, len(q.calls), len(rec.ms))
		}
	})
	t.Run("long after the latest, measures at once", func(t *testing.T) {
		clk, q := newFake(map[string][]answer{"x": val(0)})
		res, err := Run(context.Background(), q, []Spec{g}, Vars{}, p, clk, []Measurement{pass(t0.Add(-time.Hour))}, (&recorder{}).record)
		if err != nil || !res.Passed || len(q.calls) != 2 || !q.calls[0].at.Equal(t0) {
			t.Fatalf("result %+v, %v, calls %+v", res, err, q.calls)
		}
	})
	t.Run("already decided, queries nothing", func(t *testing.T) {
		clk, q := newFake(nil)
		prior := []Measurement{pass(t0), {Gate: "errors", At: t0.Add(10 * time.Second), Verdict: VerdictFail, Value: 3}}
		res, err := Run(context.Background(), q, []Spec{g}, Vars{}, p, clk, prior, (&recorder{}).record)
		if err != nil || res.Failed != `gate "errors": 1 of 2 measurements failed (limit 0): 3 not < 1` || len(q.calls) != 0 || len(clk.sleeps) != 0 {
			t.Fatalf("result %+v, %v, %d calls", res, err, len(q.calls))
		}
	})
	t.Run("errors in a row carry over", func(t *testing.T) {
		clk, q := newFake(map[string][]answer{"x": {{err: errors.New("refused")}}})
		var prior []Measurement
		for i := range 4 {
			prior = append(prior, Measurement{Gate: "errors", At: t0.Add(time.Duration(i-4) * 10 * time.Second), Verdict: VerdictError, Error: "refused"})
		}
		res, err := Run(context.Background(), q, []Spec{g}, Vars{}, p, clk, prior, (&recorder{}).record)
		if err != nil || res.Failed != `gate "errors": 5 queries in a row failed (limit 4): refused` || len(q.calls) != 1 {
			t.Fatalf("result %+v, %v, %d calls", res, err, len(q.calls))
		}
	})
}

func TestRunEndsWithItsContext(t *testing.T) {
	g := mustParse(t, "errors: x < 1")

	t.Run("while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		clk, q := newFake(map[string][]answer{"x": val(0)})
		rec := recorder{fail: func(int) error { cancel(); return nil }}
		res, err := Run(ctx, q, []Spec{g}, Vars{}, policy(nil), clk, nil, rec.record)
		if !errors.Is(err, context.Canceled) || len(q.calls) != 1 || res.Gates[0].Measured != 1 {
			t.Fatalf("result %+v, %v, %d calls", res, err, len(q.calls))
		}
	})
	t.Run("while querying: the cut query is not recorded", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		clk := &fakeClock{now: t0}
		q := querierFunc(func(ctx context.Context, _ string, _ time.Time) (Sample, error) {
			cancel()
			return Sample{}, ctx.Err()
		})
		var rec recorder
		_, err := Run(ctx, q, []Spec{g}, Vars{}, policy(nil), clk, nil, rec.record)
		if !errors.Is(err, context.Canceled) || len(rec.ms) != 0 {
			t.Fatalf("err %v, recorded %+v", err, rec.ms)
		}
	})
}

type querierFunc func(ctx context.Context, promql string, at time.Time) (Sample, error)

func (f querierFunc) Query(ctx context.Context, promql string, at time.Time) (Sample, error) {
	return f(ctx, promql, at)
}

func TestRunRefusesWhatCannotWork(t *testing.T) {
	clk, q := newFake(nil)
	rec := (&recorder{}).record
	if _, err := Run(context.Background(), q, nil, Vars{}, Policy{}, clk, nil, rec); err == nil || !strings.HasPrefix(err.Error(), "gate policy: count is 0") {
		t.Errorf("an invalid policy: %v", err)
	}
	a := mustParse(t, "a: x < 1")
	if _, err := Run(context.Background(), q, []Spec{a, a}, Vars{}, policy(nil), clk, nil, rec); err == nil || err.Error() != `gate "a" is given twice; give each gate its own name` {
		t.Errorf("a gate twice: %v", err)
	}
	res, err := Run(context.Background(), q, nil, Vars{}, policy(nil), clk, nil, rec)
	if err != nil || !res.Passed || len(q.calls) != 0 || len(clk.sleeps) != 0 {
		t.Errorf("no gates: %+v, %v", res, err)
	}
}
