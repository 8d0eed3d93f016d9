package gate

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Verdict is what one query of a gate came to.
type Verdict string

const (
	// VerdictPass: the value satisfied the comparison.
	VerdictPass Verdict = "pass"
	// VerdictFail: the value did not satisfy the comparison.
	VerdictFail Verdict = "fail"
	// VerdictNoData: the query returned no series, or NaN; Policy.NoData says how it counts.
	VerdictNoData Verdict = "no-data"
	// VerdictError: the query got no usable answer; it is no measurement, and is retried.
	VerdictError Verdict = "error"
)

// Sample is what a Querier measured: one number, or none.
type Sample struct {
	// Value is the number; NaN when Prometheus answered NaN (0/0), which Judge counts as
	// no data.
	Value float64
	// Empty is true when the query matched no series.
	Empty bool
	// Warnings are Prometheus's warnings about the query; they do not change the verdict.
	Warnings []string
}

// Judge compares one sample with the gate's threshold. No series and NaN are no data: a
// ratio of rates is NaN when nothing was counted (0/0), and no traffic is no evidence that
// the service is well.
func (s Spec) Judge(r Sample) Verdict {
	if r.Empty || math.IsNaN(r.Value) {
		return VerdictNoData
	}
	if s.Op.holds(r.Value, s.Threshold) {
		return VerdictPass
	}
	return VerdictFail
}

// Measurement is one query of one gate, as recorded: enough to judge the gate again after
// a crash (Tally) and to show a user what was measured.
type Measurement struct {
	Gate string    `json:"gate"`
	At   time.Time `json:"at"`
	// Query is the PromQL sent, template variables filled in.
	Query string `json:"query"`
	// Value is the measured number when Verdict is pass or fail, else 0. It may be ±Inf
	// (x/0): in JSON that is written as the string "+Inf" or "-Inf", as Prometheus does.
	Value    float64  `json:"value"`
	Verdict  Verdict  `json:"verdict"`
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// measurementJSON is Measurement with a value that JSON can hold when infinite (encoding/json
// refuses ±Inf, and a record that cannot be written would stop a restart).
type measurementJSON struct {
	Gate     string          `json:"gate"`
	At       time.Time       `json:"at"`
	Query    string          `json:"query"`
	Value    json.RawMessage `json:"value"`
	Verdict  Verdict         `json:"verdict"`
	Error    string          `json:"error,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
}

// MarshalJSON writes Value as a number, or as "+Inf", "-Inf" or "NaN" when it is not finite.
func (m Measurement) MarshalJSON() ([]byte, error) {
	var v []byte
	if math.IsInf(m.Value, 0) || math.IsNaN(m.Value) {
		v = []byte(strconv.Quote(strconv.FormatFloat(m.Value, 'g', -1, 64)))
	} else {
		v = []byte(strconv.FormatFloat(m.Value, 'g', -1, 64))
	}
	return json.Marshal(measurementJSON{Gate: m.Gate, At: m.At, Query: m.Query, Value: v, Verdict: m.Verdict, Error: m.Error, Warnings: m.Warnings})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Measurement) UnmarshalJSON(b []byte) error {
	var j measurementJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var v float64
	if len(j.Value) > 0 && string(j.Value) != "null" {
		var s string
		if err := json.Unmarshal(j.Value, &s); err == nil {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("gate measurement value %q: %w", s, err)
			}
			v = f
		} else if err := json.Unmarshal(j.Value, &v); err != nil {
			return fmt.Errorf("gate measurement value %s: %w", j.Value, err)
		}
	}
	*m = Measurement{Gate: j.Gate, At: j.At, Query: j.Query, Value: v, Verdict: j.Verdict, Error: j.Error, Warnings: j.Warnings}
	return nil
}

// State is where a gate stands.
type State string

const (
	// Pending: measure again.
	Pending State = "pending"
	// Passed: Count measurements were taken and no more than FailureLimit failed.
	Passed State = "passed"
	// Failed: more than FailureLimit measurements failed, or more than ErrorLimit queries
	// in a row.
	Failed State = "failed"
)

// Outcome is a gate's standing after its measurements so far.
type Outcome struct {
	Gate  string `json:"gate"`
	State State  `json:"state"`
	// Reason is one line saying why the gate stands where it does; a failure's reason
	// names the values and the comparison they missed.
	Reason string `json:"reason"`
	// WouldFail is, in a dry run, the reason the gate would have failed for; it then
	// stands Passed.
	WouldFail string `json:"would_fail,omitempty"`
	// Measured counts the measurements taken (queries that got an answer), Failures those
	// that counted as failed, Errors the queries that failed since the last answer.
	Measured int `json:"measured"`
	Failures int `json:"failures"`
	Errors   int `json:"errors"`
}

// maxListed is how many failed values a reason lists, to keep it one readable line.
const maxListed = 5

// Tally judges the gate on its measurements so far (those of ms whose Gate is s.Name, in
// the order taken), as Argo Rollouts' analysis does:
//   - a measurement fails when its comparison is false; a no-data one fails or passes as
//     p.NoData says;
//   - the gate fails as soon as more than p.FailureLimit measurements failed;
//   - a query error is no measurement; more than p.ErrorLimit of them in a row fail the
//     gate, and any measurement ends the row;
//   - the gate passes once p.Count measurements were taken without failing it.
//
// Measurements after the one that decided the gate are ignored. In a dry run a gate that
// fails passes instead, at the same point, with the reason in WouldFail.
func (s Spec) Tally(p Policy, ms []Measurement) Outcome {
	o := Outcome{Gate: s.Name, State: Pending}
	var failedValues []string
	noData, lastErr := 0, ""
	for _, m := range ms {
		if m.Gate != s.Name {
			continue
		}
		switch m.Verdict {
		case VerdictPass:
			o.Measured++
			o.Errors = 0
		case VerdictFail:
			o.Measured++
			o.Errors = 0
			o.Failures++
			failedValues = append(failedValues, FormatValue(m.Value))
		case VerdictNoData:
			o.Measured++
			o.Errors = 0
			if p.NoData != NoDataPass {
				o.Failures++
				noData++
			}
		default: // VerdictError, or a verdict this version does not know: not an answer.
			o.Errors++
			lastErr = m.Error
			if m.Verdict != VerdictError {
				lastErr = fmt.Sprintf("unknown verdict %q in a recorded measurement", m.Verdict)
			}
		}
		switch {
		case o.Errors > p.ErrorLimit:
			o.State = Failed
			o.Reason = fmt.Sprintf("gate %q: %s in a row failed (limit %d): %s", s.Name, count(o.Errors, "query", "queries"), p.ErrorLimit, lastErr)
		case o.Failures > p.FailureLimit:
			o.State = Failed
			o.Reason = fmt.Sprintf("gate %q: %d of %s failed (limit %d): %s", s.Name, o.Failures, count(o.Measured, "measurement", "measurements"), p.FailureLimit, s.failures(failedValues, noData))
		case o.Measured >= p.Count:
			o.State = Passed
		}
		if o.State != Pending {
			break
		}
	}
	if o.State != Failed {
		o.Reason = fmt.Sprintf("gate %q: %d of %s taken, %d failed (limit %d)", s.Name, o.Measured, count(p.Count, "measurement", "measurements"), o.Failures, p.FailureLimit)
		if o.Errors > 0 {
			o.Reason += fmt.Sprintf("; %s in a row failed (limit %d): %s", count(o.Errors, "query", "queries"), p.ErrorLimit, lastErr)
		}
	}
	if o.State == Failed && p.DryRun {
		o.State, o.WouldFail = Passed, o.Reason
	}
	return o
}

// failures says what failed: "0.31, 0.28 not < 0.02", and the no-data measurements.
func (s Spec) failures(values []string, noData int) string {
	var parts []string
	if len(values) > 0 {
		if len(values) > maxListed {
			values = append(values[:maxListed:maxListed], "…")
		}
		parts = append(parts, fmt.Sprintf("%s not %s %s", strings.Join(values, ", "), s.Op, formatThreshold(s.Threshold)))
	}
	switch {
	case noData == 1 && len(values) == 0:
		parts = append(parts, "no data (the query returned no series or NaN; no data counts as a failure)")
	case noData > 0:
		parts = append(parts, fmt.Sprintf("%d with no data (no series or NaN; no data counts as a failure)", noData))
	}
	return strings.Join(parts, "; ")
}

// FormatValue shows a measured value to 6 significant digits: 0.30000000000000004 is 0.3
// to a reader.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// count writes n with its noun: "1 query", "5 queries".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
