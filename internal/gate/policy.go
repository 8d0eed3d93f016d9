package gate

import (
	"fmt"
	"strings"
	"time"
)

// NoDataPolicy says how a measurement with no data counts: a query that returned no series,
// or NaN (what a ratio of rates gives when there was no traffic: 0/0).
type NoDataPolicy int

const (
	// NoDataFail counts no data as a failed measurement: a gate must not pass on the
	// silence of a service that stopped reporting (Argo Rollouts' analysis does the same
	// with an empty result). It is the zero value, so a Policy{} fails on no data.
	NoDataFail NoDataPolicy = iota
	// NoDataPass counts no data as a passing measurement, for queries that are empty when
	// all is well (e.g. only failing requests are counted).
	NoDataPass
)

// ParseNoData reads a no-data policy: "fail" or "pass".
func ParseNoData(s string) (NoDataPolicy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fail":
		return NoDataFail, nil
	case "pass":
		return NoDataPass, nil
	}
	return NoDataFail, fmt.Errorf("no-data policy %q: use fail (no data fails a measurement) or pass", s)
}

func (n NoDataPolicy) String() string {
	switch n {
	case NoDataFail:
		return "fail"
	case NoDataPass:
		return "pass"
	}
	return fmt.Sprintf("NoDataPolicy(%d)", int(n))
}

// MarshalText writes the policy as "fail" or "pass", so records read as the flag does.
func (n NoDataPolicy) MarshalText() ([]byte, error) {
	if n != NoDataFail && n != NoDataPass {
		return nil, fmt.Errorf("no-data policy %d: want fail or pass", int(n))
	}
	return []byte(n.String()), nil
}

// UnmarshalText reads "fail" or "pass".
func (n *NoDataPolicy) UnmarshalText(b []byte) error {
	p, err := ParseNoData(string(b))
	if err != nil {
		return err
	}
	*n = p
	return nil
}

// Policy is how every gate of a restart is measured and judged, Argo Rollouts' analysis
// terms: wait Delay once the batch is healthy, then take Count measurements Interval apart;
// more than FailureLimit failed measurements fail the gate, and so do more than ErrorLimit
// queries in a row that got no answer.
type Policy struct {
	// Delay is the wait before the first measurement, for the restarted instances' traffic
	// to show in the queries' rate windows.
	Delay time.Duration `json:"delay"`
	// Interval is the time between two measurements (and before a failed query is tried
	// again).
	Interval time.Duration `json:"interval"`
	// Count is the number of measurements a gate needs to pass.
	Count int `json:"count"`
	// FailureLimit is how many failed measurements a gate tolerates; one more fails it.
	FailureLimit int `json:"failure_limit"`
	// ErrorLimit is how many queries in a row may fail (Prometheus unreachable, a query it
	// rejects, a result that is not one number); one more fails the gate. A query that
	// fails is no measurement: it is tried again at the next interval.
	ErrorLimit int `json:"error_limit"`
	// NoData says whether a measurement with no data fails (the default) or passes.
	NoData NoDataPolicy `json:"no_data"`
	// DryRun measures and judges as usual but never fails a gate: a gate that would fail
	// passes at that point, its reason kept in Outcome.WouldFail.
	DryRun bool `json:"dry_run"`
}

// DefaultPolicy is Argo Rollouts' analysis defaults where they exist (no failure tolerated,
// 4 errors in a row tolerated), with 3 measurements 10 s apart: enough to see a trend
// without holding a batch for long.
func DefaultPolicy() Policy {
	return Policy{Interval: 10 * time.Second, Count: 3, FailureLimit: 0, ErrorLimit: 4, NoData: NoDataFail}
}

// PolicyProblem is one setting of a Policy that cannot work.
type PolicyProblem struct {
	// Setting names the setting as its flag does after "-gate-": count, delay, interval,
	// failure-limit, error-limit or no-data; a problem of two settings together names the
	// one to change.
	Setting string
	// Text says what is wrong and the fix.
	Text string
}

// PolicyError is every problem of a policy, so that a caller can name each setting its
// own way (the flag it came from); Error reads them on one line.
type PolicyError struct {
	Problems []PolicyProblem
}

func (e *PolicyError) Error() string {
	texts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		texts[i] = p.Text
	}
	return "gate policy: " + strings.Join(texts, "; ")
}

// Validate reports every setting of p that cannot work, each with its fix, as one line: a
// *PolicyError.
func (p Policy) Validate() error {
	var problems []PolicyProblem
	add := func(setting, format string, a ...any) {
		problems = append(problems, PolicyProblem{Setting: setting, Text: fmt.Sprintf(format, a...)})
	}
	if p.Count < 1 {
		add("count", "count is %d: a gate takes at least 1 measurement", p.Count)
	}
	if p.Delay < 0 {
		add("delay", "delay is %s: use 0 or more", p.Delay)
	}
	switch {
	case p.Interval < 0:
		add("interval", "interval is %s: use a positive interval such as 10s", p.Interval)
	case p.Interval == 0 && p.Count > 1:
		add("interval", "interval is 0 with count %d: the measurements need time between them; use a positive interval such as 10s", p.Count)
	case p.Interval == 0 && p.ErrorLimit > 0:
		add("interval", "interval is 0 with error limit %d: a failed query is tried again after the interval; use a positive interval such as 10s, or error limit 0", p.ErrorLimit)
	}
	if p.FailureLimit < 0 {
		add("failure-limit", "failure limit is %d: use 0 (no failed measurement tolerated) or more", p.FailureLimit)
	} else if p.Count >= 1 && p.FailureLimit >= p.Count {
		// Every measurement could fail and the gate still pass: a gate that cannot fail is
		// a mistake (DryRun is the way to watch without gating).
		add("failure-limit", "failure limit %d lets all %d measurements fail, so no gate could fail: use a failure limit below the count, or a dry run to only watch", p.FailureLimit, p.Count)
	}
	if p.ErrorLimit < 0 {
		add("error-limit", "error limit is %d: use 0 (the first failed query fails the gate) or more", p.ErrorLimit)
	}
	if p.NoData != NoDataFail && p.NoData != NoDataPass {
		add("no-data", "no-data policy is %s: use fail or pass", p.NoData)
	}
	if len(problems) == 0 {
		return nil
	}
	return &PolicyError{Problems: problems}
}
