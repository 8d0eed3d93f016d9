package gate

import (
	"context"
	"fmt"
	"time"
)

// Querier evaluates an instant query at a moment: Run's only way to Prometheus, so that
// tests can give it a fake.
type Querier interface {
	Query(ctx context.Context, promql string, at time.Time) (Sample, error)
}

// Clock is Run's time: the engine gives it the wall clock (paused with cluster.Sleep),
// tests a fake one, so that minutes of gating take no real time.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends; it reports whether it waited all of d.
	Sleep(ctx context.Context, d time.Duration) bool
}

// Result is how the gates of one batch ended.
type Result struct {
	// Passed is true when every gate passed (in a dry run, also those that would have
	// failed: see each Outcome's WouldFail).
	Passed bool `json:"passed"`
	// Failed is the reason of the first gate (in the order given) that failed.
	Failed string `json:"failed,omitempty"`
	// Gates are every gate's outcome, in the order given: the failed gate's and where the
	// others stood.
	Gates []Outcome `json:"gates"`
}

// Run gates one batch: it waits p.Delay, then at each tick, p.Interval apart, queries every
// gate still pending (all at the same evaluation time, the tick's), hands each measurement
// to record before going on, and judges the gates (Tally). It returns when every gate has
// passed or the first one failed (Result), or when ctx ends (ctx.Err()), or when record
// fails (its error: a measurement the caller could not keep must not count).
//
// A query that fails is retried at the next tick, like a measurement: Prometheus's answer
// is not expected sooner, and the error limit then spans ErrorLimit intervals (40 s by
// default) rather than a burst of retries. A query cut short because ctx ended is not
// recorded.
//
// prior are the measurements already recorded for this batch, e.g. before a crash: Run
// counts them as if it had taken them, does not wait Delay again, and takes its next
// measurement an Interval after the latest of them. Pass none to start over.
func Run(ctx context.Context, q Querier, gates []Spec, vars Vars, p Policy, clk Clock, prior []Measurement, record func(Measurement) error) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	names := make(map[string]bool, len(gates))
	for _, g := range gates {
		if names[g.Name] {
			return Result{}, fmt.Errorf("gate %q is given twice; give each gate its own name", g.Name)
		}
		names[g.Name] = true
	}

	ms := append([]Measurement(nil), prior...)
	res := judge(gates, p, ms)
	if res.Passed || res.Failed != "" {
		return res, nil
	}

	next := clk.Now().Add(p.Delay)
	var latest time.Time
	for _, m := range prior {
		if names[m.Gate] && m.At.After(latest) {
			latest = m.At
		}
	}
	if !latest.IsZero() {
		next = latest.Add(p.Interval)
	}

	for {
		if d := next.Sub(clk.Now()); d > 0 && !clk.Sleep(ctx, d) {
			return res, ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		at := clk.Now()
		for i, g := range gates {
			if res.Gates[i].State != Pending {
				continue
			}
			m, err := Measure(ctx, q, g, vars, at)
			if err != nil && ctx.Err() != nil {
				return res, ctx.Err()
			}
			if err := record(m); err != nil {
				return res, fmt.Errorf("recording a measurement of gate %q: %w", g.Name, err)
			}
			ms = append(ms, m)
		}
		res = judge(gates, p, ms)
		if res.Passed || res.Failed != "" {
			return res, nil
		}
		next = at.Add(p.Interval)
	}
}

// Measure queries one gate at the moment at; the error is the query's, also kept in the
// measurement.
func Measure(ctx context.Context, q Querier, g Spec, vars Vars, at time.Time) (Measurement, error) {
	m := Measurement{Gate: g.Name, At: at, Query: g.Query(vars)}
	s, err := q.Query(ctx, m.Query, at)
	if err != nil {
		m.Verdict, m.Error = VerdictError, err.Error()
		return m, err
	}
	m.Verdict, m.Warnings = g.Judge(s), s.Warnings
	if m.Verdict != VerdictNoData { // no data's value (NaN or none) is not a number to keep
		m.Value = s.Value
	}
	return m, nil
}

// judge tallies every gate: the result passes when all passed, fails with the first failure.
func judge(gates []Spec, p Policy, ms []Measurement) Result {
	res := Result{Passed: true, Gates: make([]Outcome, len(gates))}
	for i, g := range gates {
		o := g.Tally(p, ms)
		res.Gates[i] = o
		if o.State != Passed {
			res.Passed = false
		}
		if o.State == Failed && res.Failed == "" {
			res.Failed = o.Reason
		}
	}
	return res
}
