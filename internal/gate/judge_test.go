package gate

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// TestJudge: a sample passes when "value op threshold" holds and fails when it does not,
// infinities included; NaN and no series are no data, whatever the comparison.
func TestJudge(t *testing.T) {
	gate := func(op Op, threshold float64) Spec {
		return Spec{Name: "g", PromQL: "x", Op: op, Threshold: threshold}
	}
	tests := []struct {
		gate   Spec
		sample Sample
		want   Verdict
	}{
		{gate(OpLess, 0.02), Sample{Value: 0.01}, VerdictPass},
		{gate(OpLess, 0.02), Sample{Value: 0.02}, VerdictFail},
		{gate(OpLessEqual, 0.02), Sample{Value: 0.02}, VerdictPass},
		{gate(OpLessEqual, 0.02), Sample{Value: 0.03}, VerdictFail},
		{gate(OpGreater, 2), Sample{Value: 3}, VerdictPass},
		{gate(OpGreater, 2), Sample{Value: 2}, VerdictFail},
		{gate(OpGreaterEqual, 2), Sample{Value: 2}, VerdictPass},
		{gate(OpGreaterEqual, 0), Sample{Value: -1}, VerdictFail},
		{gate(OpEqual, 3), Sample{Value: 3}, VerdictPass},
		{gate(OpEqual, 3), Sample{Value: 2}, VerdictFail},
		{gate(OpNotEqual, 3), Sample{Value: 2}, VerdictPass},
		{gate(OpNotEqual, 3), Sample{Value: 3}, VerdictFail},
		{gate(OpLess, 0.02), Sample{Value: math.Inf(1)}, VerdictFail},
		{gate(OpGreater, 0.02), Sample{Value: math.Inf(1)}, VerdictPass},
		{gate(OpLess, 0.02), Sample{Value: math.NaN()}, VerdictNoData},
		{gate(OpNotEqual, 0.02), Sample{Value: math.NaN()}, VerdictNoData},
		{gate(OpGreaterEqual, 0), Sample{Empty: true}, VerdictNoData},
	}
	for _, tt := range tests {
		if got := tt.gate.Judge(tt.sample); got != tt.want {
			t.Errorf("gate %q judging %+v: %s, want %s", tt.gate, tt.sample, got, tt.want)
		}
	}
}

// m makes measurements of gate "errors" in order: a number is a value (pass or fail as
// judged by errorsGate), "no" no data, "e:msg" a query error.
func m(items ...any) []Measurement {
	var ms []Measurement
	for _, it := range items {
		x := Measurement{Gate: errorsGate.Name}
		switch it := it.(type) {
		case float64:
			x.Value = it
			x.Verdict = errorsGate.Judge(Sample{Value: it})
		case string:
			switch {
			case it == "no":
				x.Verdict = VerdictNoData
			case strings.HasPrefix(it, "e:"):
				x.Verdict, x.Error = VerdictError, it[2:]
			default:
				x.Verdict = Verdict(it)
			}
		case Measurement:
			x = it
		}
		ms = append(ms, x)
	}
	return ms
}

var errorsGate = Spec{Name: "errors", PromQL: "rate", Op: OpLess, Threshold: 0.02}

func TestTally(t *testing.T) {
	base := DefaultPolicy() // count 3, failure limit 0, error limit 4, no data fails
	with := func(f func(*Policy)) Policy { p := base; f(&p); return p }
	tests := []struct {
		name        string
		p           Policy
		ms          []Measurement
		state       State
		reason      string // exact, or a prefix when it ends in "…"
		wouldFail   string
		measured    int
		failures    int
		errorsInRow int
	}{
		{name: "nothing yet", p: base, state: Pending, reason: `gate "errors": 0 of 3 measurements taken, 0 failed (limit 0)`},
		{name: "two passes", p: base, ms: m(0.01, 0.0), state: Pending, measured: 2,
			reason: `gate "errors": 2 of 3 measurements taken, 0 failed (limit 0)`},
		{name: "count passes", p: base, ms: m(0.01, 0.0, 0.019), state: Passed, measured: 3,
			reason: `gate "errors": 3 of 3 measurements taken, 0 failed (limit 0)`},
		{name: "first failure over limit 0", p: base, ms: m(0.01, 0.31), state: Failed, measured: 2, failures: 1,
			reason: `gate "errors": 1 of 2 measurements failed (limit 0): 0.31 not < 0.02`},
		{name: "within the failure limit", p: with(func(p *Policy) { p.FailureLimit = 1 }), ms: m(0.31, 0.01, 0.01), state: Passed, measured: 3, failures: 1,
			reason: `gate "errors": 3 of 3 measurements taken, 1 failed (limit 1)`},
		{name: "over the failure limit", p: with(func(p *Policy) { p.FailureLimit = 1 }), ms: m(0.31, 0.01, 0.28), state: Failed, measured: 3, failures: 2,
			reason: `gate "errors": 2 of 3 measurements failed (limit 1): 0.31, 0.28 not < 0.02`},
		{name: "fails as soon as over the limit, before count", p: with(func(p *Policy) { p.FailureLimit = 1; p.Count = 10 }), ms: m(0.31, 0.28), state: Failed, measured: 2, failures: 2,
			reason: `gate "errors": 2 of 2 measurements failed (limit 1): 0.31, 0.28 not < 0.02`},
		{name: "no data fails by default", p: base, ms: m("no"), state: Failed, measured: 1, failures: 1,
			reason: `gate "errors": 1 of 1 measurement failed (limit 0): no data (the query returned no series or NaN; no data counts as a failure)`},
		{name: "no data and values", p: with(func(p *Policy) { p.FailureLimit = 2; p.Count = 5 }), ms: m(0.5, "no", "no"), state: Failed, measured: 3, failures: 3,
			reason: `gate "errors": 3 of 3 measurements failed (limit 2): 0.5 not < 0.02; 2 with no data (no series or NaN; no data counts as a failure)`},
		{name: "no data passes when asked", p: with(func(p *Policy) { p.NoData = NoDataPass }), ms: m("no", 0.01, "no"), state: Passed, measured: 3},
		{name: "errors below the limit", p: base, ms: m("e:a", "e:b", "e:c", "e:d"), state: Pending, errorsInRow: 4,
			reason: `gate "errors": 0 of 3 measurements taken, 0 failed (limit 0); 4 queries in a row failed (limit 4): d`},
		{name: "errors over the limit", p: base, ms: m("e:a", "e:b", "e:c", "e:d", "e:connection refused"), state: Failed, errorsInRow: 5,
			reason: `gate "errors": 5 queries in a row failed (limit 4): connection refused`},
		{name: "a measurement ends the row of errors", p: base, ms: m("e:a", "e:b", "e:c", "e:d", 0.01, "e:a", "e:b", "e:c", "e:d", 0.01), state: Pending, measured: 2,
			reason: `gate "errors": 2 of 3 measurements taken, 0 failed (limit 0)`},
		{name: "a no-data measurement ends the row too", p: with(func(p *Policy) { p.NoData = NoDataPass; p.ErrorLimit = 1 }), ms: m("e:a", "no", "e:b", 0.01, "e:c", 0.0), state: Passed, measured: 3},
		{name: "errors are no measurements", p: base, ms: m(0.01, "e:x", 0.01), state: Pending, measured: 2},
		{name: "error limit 0: the first error fails", p: with(func(p *Policy) { p.ErrorLimit = 0 }), ms: m(0.01, "e:timeout"), state: Failed, measured: 1, errorsInRow: 1,
			reason: `gate "errors": 1 query in a row failed (limit 0): timeout`},
		{name: "an unknown verdict is an error", p: with(func(p *Policy) { p.ErrorLimit = 0 }), ms: m("maybe"), state: Failed, errorsInRow: 1,
			reason: `gate "errors": 1 query in a row failed (limit 0): unknown verdict "maybe" in a recorded measurement`},
		{name: "other gates' measurements are not counted", p: base, ms: m(0.01, Measurement{Gate: "latency", Verdict: VerdictFail, Value: 9}, Measurement{Gate: "latency", Verdict: VerdictError}, 0.01), state: Pending, measured: 2},
		{name: "nothing after a failure counts", p: base, ms: m(0.5, 0.01, 0.01, 0.01), state: Failed, measured: 1, failures: 1,
			reason: `gate "errors": 1 of 1 measurement failed (limit 0): 0.5 not < 0.02`},
		{name: "nothing after a pass counts", p: base, ms: m(0.01, 0.01, 0.01, 0.5, "e:x"), state: Passed, measured: 3},
		{name: "many failures are cut short", p: with(func(p *Policy) { p.FailureLimit = 6; p.Count = 10 }), ms: m(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7), state: Failed, measured: 7, failures: 7,
			reason: `gate "errors": 7 of 7 measurements failed (limit 6): 0.1, 0.2, 0.3, 0.4, 0.5, … not < 0.02`},
		{name: "values read to 6 digits, infinity too", p: with(func(p *Policy) { p.FailureLimit = 1 }), ms: m(0.1+0.2, math.Inf(1)), state: Failed, measured: 2, failures: 2,
			reason: `gate "errors": 2 of 2 measurements failed (limit 1): 0.3, +Inf not < 0.02`},
		{name: "dry run passes where it would fail", p: with(func(p *Policy) { p.DryRun = true }), ms: m(0.01, 0.31), state: Passed, measured: 2, failures: 1,
			reason:    `gate "errors": 1 of 2 measurements failed (limit 0): 0.31 not < 0.02`,
			wouldFail: `gate "errors": 1 of 2 measurements failed (limit 0): 0.31 not < 0.02`},
		{name: "dry run passes on errors too", p: with(func(p *Policy) { p.DryRun = true; p.ErrorLimit = 1 }), ms: m("e:a", "e:b"), state: Passed, errorsInRow: 2,
			wouldFail: `gate "errors": 2 queries in a row failed (limit 1): b`},
		{name: "dry run that would pass", p: with(func(p *Policy) { p.DryRun = true }), ms: m(0.01, 0.01, 0.01), state: Passed, measured: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorsGate.Tally(tt.p, tt.ms)
			if got.Gate != "errors" || got.State != tt.state || got.Measured != tt.measured || got.Failures != tt.failures || got.Errors != tt.errorsInRow || got.WouldFail != tt.wouldFail {
				t.Fatalf("Tally = %+v\nwant state %s, measured %d, failures %d, errors %d, would fail %q", got, tt.state, tt.measured, tt.failures, tt.errorsInRow, tt.wouldFail)
			}
			if tt.reason != "" && got.Reason != tt.reason {
				t.Fatalf("reason\n got %s\nwant %s", got.Reason, tt.reason)
			}
		})
	}
}

func TestMeasurementJSON(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []float64{0.3, 0, -2.5e-7, math.Inf(1), math.Inf(-1), math.MaxFloat64} {
		in := Measurement{Gate: "errors", At: at, Query: `x{a="b"}`, Value: v, Verdict: VerdictFail, Warnings: []string{"w"}}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("marshal %v: %v", v, err)
		}
		var out Measurement
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if out.Gate != in.Gate || !out.At.Equal(in.At) || out.Query != in.Query || out.Value != in.Value || out.Verdict != in.Verdict || len(out.Warnings) != 1 {
			t.Fatalf("round trip of %s: %+v, want %+v", b, out, in)
		}
	}
	b, _ := json.Marshal(Measurement{Gate: "g", Value: math.Inf(1), Verdict: VerdictFail})
	if !strings.Contains(string(b), `"value":"+Inf"`) {
		t.Fatalf("+Inf is written as %s", b)
	}
	b, _ = json.Marshal(Measurement{Gate: "g", Value: 0.25, Verdict: VerdictPass})
	if want := `{"gate":"g","at":"0001-01-01T00:00:00Z","query":"","value":0.25,"verdict":"pass"}`; string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	var out Measurement
	if err := json.Unmarshal([]byte(`{"gate":"g","value":"bad"}`), &out); err == nil {
		t.Fatal("a value that is no number was read")
	}
}
