package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// GatesConfig wires the metric gates (-gate).
type GatesConfig struct {
	// Prometheus gives the Queriers on Prometheus (the assembly's prometheus.Dialer, made
	// from the flags and the environment); nil: no Prometheus is configured.
	Prometheus PrometheusDialer
	// Querier, when set, answers every gate's query instead of Prometheus (tests).
	Querier gate.Querier
}

// PrometheusDialer gives the engine Prometheus at an address: where a restart's planner
// reached it, else the configured one (gate/prometheus.Dialer). The engine makes no client
// itself: the assembly that read the flags and the environment hands this in.
type PrometheusDialer interface {
	// Address is the configured Prometheus's address, "" when none is.
	Address() string
	Dial(address string) (gate.Querier, error)
}

// prometheusAddress is the configured Prometheus's address, "" when none is.
func (e *Engine) prometheusAddress() string {
	if e.gates.Prometheus == nil {
		return ""
	}
	return e.gates.Prometheus.Address()
}

// querier returns what asks the restart's gates' queries: Prometheus at the address the
// record names.
func (e *Engine) querier(address string) (gate.Querier, error) {
	if e.gates.Querier != nil {
		return e.gates.Querier, nil
	}
	if address == "" {
		address = e.prometheusAddress()
	}
	if address == "" {
		return nil, errors.New("the restart has metric gates but no Prometheus address: give the driver -prometheus-address (or NOMAD_RESTART_PROMETHEUS_ADDR)")
	}
	if e.gates.Prometheus == nil {
		return nil, errors.New("the restart has metric gates but no Prometheus is configured")
	}
	return e.gates.Prometheus.Dial(address)
}

// gateOutcome is how a batch's metric gates ended for the driver's decision.
type gateOutcome struct {
	// failed is the reason the gates failed ("" when they passed, or there are none).
	failed string
	// interrupted says an operator's cancel or pause stopped the measuring: the caller
	// obeys it, and a later driver measures on from what was recorded.
	interrupted bool
}

// passGates judges batch b's metric gates, from the measurements recorded so far: each
// measurement is persisted (and shown) before the next is taken, so a driver that takes
// the restart over counts them and does not measure the batch again from scratch.
func (d *driver) passGates(ctx context.Context, b int) (gateOutcome, error) {
	d.mu.Lock()
	g := d.rec.Spec.Gates
	if g == nil || len(g.Specs) == 0 {
		d.mu.Unlock()
		return gateOutcome{}, nil
	}
	var prior []gate.Measurement
	run := d.rec.GateRunOf(b)
	if run != nil {
		switch run.Outcome {
		case restart.GatePassed, restart.GateWouldFail:
			d.mu.Unlock()
			return gateOutcome{}, nil
		case restart.GateFailed:
			d.mu.Unlock()
			return gateOutcome{failed: run.Reason}, nil
		}
		prior = append(prior, run.Measurements...)
	}
	vars := batchVars(d.rec, b)
	d.mu.Unlock()

	specs, err := g.Parsed()
	if err == nil {
		err = g.Policy.Validate()
	}
	var q gate.Querier
	if err == nil {
		q, err = d.e.querier(g.PrometheusAddress)
	}
	if c, ok := q.(interface{ Close() }); ok {
		defer c.Close() // its idle connections: a batch's gates are minutes apart
	}
	if err != nil {
		// Checked at planning; only a record from another version, or a driver missing
		// the address, gets here: the gates cannot judge, so they do not pass.
		return d.endGates(ctx, b, gate.Result{Failed: "metric gates: " + err.Error()})
	}
	if run == nil {
		queries := make(map[string]string, len(specs))
		names := make([]string, len(specs))
		for i, s := range specs {
			queries[s.Name], names[i] = s.Query(vars), s.Name
		}
		err := d.step(ctx, func(r *restart.Record) {
			r.AddGateRun(b, queries, d.e.now())
			d.eventLocked(restart.Event{Type: restart.EventGate, Batch: b, Message: fmt.Sprintf(
				"Measuring the %s batch's gates (%s): %s", restart.Ordinal(b), strings.Join(names, ", "), describePolicy(g.Policy))})
		})
		if err != nil {
			return gateOutcome{}, err
		}
	}

	// An operator's cancel or pause stops the measuring at once, as it stops a batch wait.
	mctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go d.stopOnIntent(mctx, stop)
	res, err := gate.Run(mctx, q, specs, vars, g.Policy, wallClock{}, prior, func(m gate.Measurement) error {
		return d.step(ctx, func(r *restart.Record) {
			stored := m
			stored.Query = "" // the batch's queries are kept once, in GateRun.Queries
			gr := r.GateRunOf(b)
			gr.Measurements = append(gr.Measurements, stored)
			d.eventLocked(restart.Event{Type: restart.EventGate, Batch: b, Message: "Gate " + describeMeasurement(specs, g.Policy, m)})
		})
	})
	if err != nil {
		if errors.Is(context.Cause(mctx), errIntent) && ctx.Err() == nil {
			return gateOutcome{interrupted: true}, nil
		}
		return gateOutcome{}, err
	}
	return d.endGates(ctx, b, res)
}

// errIntent ends a gate's measuring when an operator asked to cancel or pause.
var errIntent = errors.New("an operator asked to cancel or pause")

// stopOnIntent calls stop once the record's intent is cancel or pause, or ctx ends.
func (d *driver) stopOnIntent(ctx context.Context, stop context.CancelCauseFunc) {
	for {
		d.mu.Lock()
		intent := d.rec.Control.Intent
		d.mu.Unlock()
		if intent == restart.IntentCancel || intent == restart.IntentPause {
			stop(errIntent)
			return
		}
		if d.waitChange(ctx, 0) != nil {
			return
		}
	}
}

// endGates records how batch b's gates ended, with an event saying it.
func (d *driver) endGates(ctx context.Context, b int, res gate.Result) (gateOutcome, error) {
	outcome, reason, msg := restart.GatePassed, "", fmt.Sprintf("The %s batch's gates passed", restart.Ordinal(b))
	var wouldFail []string
	for _, o := range res.Gates {
		if o.WouldFail != "" {
			wouldFail = append(wouldFail, o.WouldFail)
		}
	}
	switch {
	case res.Failed != "":
		outcome, reason = restart.GateFailed, res.Failed
		msg = fmt.Sprintf("The %s batch's gates failed: %s", restart.Ordinal(b), res.Failed)
	case len(wouldFail) > 0:
		outcome, reason = restart.GateWouldFail, strings.Join(wouldFail, "; ")
		msg = fmt.Sprintf("The %s batch's gates would have failed (dry run, going on): %s", restart.Ordinal(b), reason)
	}
	err := d.step(ctx, func(r *restart.Record) {
		gr := r.AddGateRun(b, nil, d.e.now())
		gr.Outcome, gr.Reason, gr.Ended = outcome, reason, d.e.now()
		typ := restart.EventGatePassed
		switch outcome {
		case restart.GateFailed:
			typ = restart.EventGateFailed
		case restart.GateWouldFail:
			typ = restart.EventGateWouldFail
		}
		d.eventLocked(restart.Event{Type: typ, Batch: b, Message: msg})
	})
	if outcome != restart.GateFailed {
		reason = ""
	}
	return gateOutcome{failed: reason}, err
}

// batchVars are the template variables of batch b's gates.
func batchVars(r *restart.Record, b int) gate.Vars {
	v := gate.Vars{Job: r.JobID, Namespace: r.Namespace, Batch: b}
	var groups []string
	for _, i := range r.BatchAllocs(b) {
		a := r.Allocs[i]
		v.AllocIDs = append(v.AllocIDs, a.ID)
		v.AllocNames = append(v.AllocNames, a.Name)
		if !contains(groups, a.Group) {
			groups = append(groups, a.Group)
		}
	}
	// A batch spans groups only when the restart does; {{group}} then names them all, as
	// Nomad writes a list.
	v.Group = strings.Join(groups, ",")
	return v
}

// describePolicy says how the gates measure: "3 measurements 10s apart after 30s, none may fail".
func describePolicy(p gate.Policy) string {
	s := fmt.Sprintf("%d measurements %s apart", p.Count, p.Interval)
	if p.Count == 1 {
		s = "1 measurement"
	}
	if p.Delay > 0 {
		s += " after " + p.Delay.String()
	}
	switch p.FailureLimit {
	case 0:
		s += ", none may fail"
	default:
		s += fmt.Sprintf(", at most %d may fail", p.FailureLimit)
	}
	if p.DryRun {
		s += " (dry run: a failure is recorded, never acted on)"
	}
	return s
}

// describeMeasurement is one measurement for the log: "errors: 0.013 < 0.02: pass",
// "errors: 0.2 not < 0.02: fail".
func describeMeasurement(specs []gate.Spec, policy gate.Policy, m gate.Measurement) string {
	var spec *gate.Spec
	for i := range specs {
		if specs[i].Name == m.Gate {
			spec = &specs[i]
		}
	}
	switch {
	case m.Verdict == gate.VerdictError:
		return fmt.Sprintf("%s: query failed: %s", m.Gate, m.Error)
	case m.Verdict == gate.VerdictNoData:
		return fmt.Sprintf("%s: no data (%s)", m.Gate, noDataCounts(policy))
	case spec == nil:
		return fmt.Sprintf("%s: %s: %s", m.Gate, gate.FormatValue(m.Value), m.Verdict)
	}
	not := ""
	if m.Verdict == gate.VerdictFail {
		not = "not "
	}
	return fmt.Sprintf("%s: %s %s%s %s: %s", m.Gate, gate.FormatValue(m.Value), not, spec.Op, gate.FormatValue(spec.Threshold), m.Verdict)
}

// resolveGates checks the restart's metric gates at planning and records where Prometheus
// is, so that any driver asks the same one. Nothing is queried here (see MeasureGates).
func (e *Engine) resolveGates(spec *restart.Spec) error {
	if spec.Gates == nil || len(spec.Gates.Specs) == 0 {
		spec.Gates = nil
		return nil
	}
	// What planning fills in goes to the plan's own copy: the caller's gates may be shared
	// (a fleet's -gate, planned for several jobs at once and for its upstreams' evidence).
	own := *spec.Gates
	spec.Gates = &own
	g := spec.Gates
	typed, err := g.Parsed()
	if err != nil {
		return err
	}
	g.Typed = typed // parsed once, kept in the record: drivers use them as filed
	if err := g.Policy.Validate(); err != nil {
		return fmt.Errorf("invalid gate options: %w", err)
	}
	if e.gates.Querier == nil {
		if g.PrometheusAddress == "" {
			g.PrometheusAddress = e.prometheusAddress()
		}
		if g.PrometheusAddress == "" {
			return errors.New("-gate needs Prometheus: give -prometheus-address (or set NOMAD_RESTART_PROMETHEUS_ADDR)")
		}
	}
	return nil
}

// MeasureGates queries each of the planned restart's gates once, as its first batch's gates
// would be now: a dry run shows the values and verdicts, so that a typo in a query, or a
// gate that would fail already, is seen before anything restarts. A query's error is in its
// measurement; the error returned is one that stops every query (no Prometheus address, a
// bad TLS file).
func (e *Engine) MeasureGates(ctx context.Context, rec *restart.Record) ([]gate.Measurement, error) {
	g := rec.Spec.Gates
	if g == nil || len(g.Specs) == 0 {
		return nil, nil
	}
	specs, err := g.Parsed()
	if err != nil {
		return nil, err
	}
	q, err := e.querier(g.PrometheusAddress)
	if err != nil {
		return nil, err
	}
	if c, ok := q.(interface{ Close() }); ok {
		defer c.Close()
	}
	vars := batchVars(rec, 1)
	at := wallClock{}.Now()
	out := make([]gate.Measurement, 0, len(specs))
	for _, s := range specs {
		m, err := gate.Measure(ctx, q, s, vars, at)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		out = append(out, m) // a query's error is in its measurement
	}
	return out, nil
}

// noDataCounts says what a measurement with no data counts as under policy.
func noDataCounts(p gate.Policy) string {
	if p.NoData == gate.NoDataPass {
		return "counts as passing"
	}
	return "counts as failed"
}
