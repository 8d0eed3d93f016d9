package restart

import (
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
)

// Gates is a restart's metric gates (-gate): Prometheus queries that must hold after each
// batch is healthy before the next batch starts. Processes that run and pass their checks
// are not a service that works: a bad flag or a rotated password often passes /health while
// half the requests fail, and a rollout would carry it to every instance.
type Gates struct {
	// Specs are the gates as given ("NAME: QUERY OP NUMBER"), for people to read.
	Specs []string
	// Typed are Specs as parsed once when the restart was filed; a record from a version
	// without them has its Specs parsed when it is read (Parsed).
	Typed []gate.Spec `json:",omitempty"`
	// Policy is how they are measured and judged (-gate-delay, -gate-interval, ...).
	Policy gate.Policy
	// PrometheusAddress is where Prometheus was reached at planning (no token is recorded),
	// so that a driver resuming the restart elsewhere asks the same Prometheus.
	PrometheusAddress string
}

// Parsed returns the gates typed: as filed, or (a record from a version that kept only the
// text) parsed from Specs.
func (g *Gates) Parsed() ([]gate.Spec, error) {
	if len(g.Typed) == len(g.Specs) && len(g.Typed) > 0 {
		return g.Typed, nil
	}
	return gate.ParseAll(g.Specs)
}

// GateOutcome is how a batch's gates ended.
type GateOutcome string

const (
	GateMeasuring GateOutcome = "measuring" // measurements still to take
	GatePassed    GateOutcome = "passed"
	GateFailed    GateOutcome = "failed"
	// GateWouldFail is a dry run's failure: recorded, never acted on.
	GateWouldFail GateOutcome = "would-fail"
)

// GateRun is the gates' judgement of one batch: every measurement, then the outcome. A
// resumed driver goes on from the measurements recorded.
type GateRun struct {
	Batch int
	// Queries are the gates' queries as sent for this batch (templates filled in), by gate.
	Queries      map[string]string `json:",omitempty"`
	Started      time.Time
	Ended        time.Time `json:",omitzero"`
	Outcome      GateOutcome
	Reason       string `json:",omitempty"`
	Measurements []gate.Measurement
}

// GateRunOf returns the record's gate run of batch b (nil: none yet).
func (r *Record) GateRunOf(b int) *GateRun {
	for i := range r.GateRuns {
		if r.GateRuns[i].Batch == b {
			return &r.GateRuns[i]
		}
	}
	return nil
}

// maxGateRunsMeasured bounds the gate runs whose measurements a record keeps: the record is
// a Nomad variable, and a restart of hundreds of batches would outgrow it. Older runs keep
// their outcome and reason.
const maxGateRunsMeasured = 20

// AddGateRun starts batch b's gate run (or returns the one recorded) and trims the
// measurements of the oldest runs past maxGateRunsMeasured.
func (r *Record) AddGateRun(b int, queries map[string]string, at time.Time) *GateRun {
	if g := r.GateRunOf(b); g != nil {
		return g
	}
	r.GateRuns = append(r.GateRuns, GateRun{Batch: b, Queries: queries, Started: at, Outcome: GateMeasuring})
	if n := len(r.GateRuns) - maxGateRunsMeasured; n > 0 {
		for i := range n {
			r.GateRuns[i].Measurements, r.GateRuns[i].Queries = nil, nil
		}
	}
	return &r.GateRuns[len(r.GateRuns)-1]
}
