package restart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
)

// Value is one option's value as a user typed it. Set says it was given at all: an option
// given empty (a script's unset variable, `-every ""`, `"Health": ""`) is refused, never
// taken for its default, since the default might restart more than the user meant.
type Value struct {
	Text string
	Set  bool
}

// Given is a Value that was typed.
func Given(text string) Value { return Value{Text: text, Set: true} }

// UnmarshalJSON reads a JSON string (or a number, as `"BatchSize": 2` is written by hand);
// null reads as not given.
func (v *Value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*v = Value{}
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = Given(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("give a string such as \"2\" or \"30s\", not %s", b)
	}
	*v = Given(n.String())
	return nil
}

// MarshalJSON writes the text, or null when not given.
func (v Value) MarshalJSON() ([]byte, error) {
	if !v.Set {
		return []byte("null"), nil
	}
	return json.Marshal(v.Text)
}

// Options is one restart's options as filed, option by option as typed: `run`'s flags, the
// page's form and its JSON API, a job's meta. Every entry point builds one and Resolve turns
// it into the Spec that is planned and recorded, so that the same request gets the same
// defaults, the same checks and the same errors from wherever it is filed. The JSON field
// names are the page's API (docs/api.md).
type Options struct {
	BatchSize          Value
	BatchWait          Value
	Groups             []string `json:",omitempty"`
	Tasks              []string `json:",omitempty"`
	AllTasks           bool     `json:",omitempty"`
	Reschedule         bool     `json:",omitempty"`
	NoShutdownDelay    bool     `json:",omitempty"`
	OnError            Value
	Yes                bool `json:",omitempty"`
	Health             Value
	HealthyDeadline    Value
	MinHealthyTime     Value
	MaxUnavailable     Value
	Filter             Value
	Nodes              []string `json:",omitempty"`
	Datacenters        []string `json:",omitempty"`
	UnhealthyFirst     bool     `json:",omitempty"`
	Surge              Value
	SurgeIgnoreScaling bool `json:",omitempty"`
	Drain              Value
	// DrainUntil are -drain-until values (KIND=ADDRESS or prometheus:QUERY), parsed into
	// Spec.DrainUntil; BalancerRefresh are -balancer-refresh values (NAME=DURATION).
	DrainUntil      []string `json:",omitempty"`
	BalancerRefresh []string `json:",omitempty"`
	// Gates are -gate values ("NAME: QUERY OP NUMBER"), measured with the policy below.
	Gates            []string `json:",omitempty"`
	GateDelay        Value
	GateInterval     Value
	GateCount        Value
	GateFailureLimit Value
	GateErrorLimit   Value
	GateNoData       Value
	GateDryRun       bool `json:",omitempty"`
}

// Filing says where a restart is filed from: it decides whether its questions (-batch-wait
// ask, -on-error ask) can be answered, and so what -on-error defaults to.
type Filing int

const (
	// AtTerminal: run at an interactive terminal, which answers the questions.
	AtTerminal Filing = iota
	// NoTerminal: run in a script or a pipeline. Nothing answers a question, so "ask" is
	// refused unless -yes answers it (as `nomad job restart` refuses it), and -on-error
	// defaults to fail, which the plan says.
	NoTerminal
	// Detached: recorded for an agent to drive (run -detach, a schedule's occurrence, the
	// page's new restart): questions wait for `nomad-restart answer` or the page.
	Detached
	// Unattended: started by the agent on its own (a config-change rollout): questions may
	// be asked where the job's meta asks for them, and -on-error defaults to fail, since
	// nobody is told to watch.
	Unattended
)

// String names the filing as the plan's notes say it.
func (f Filing) String() string {
	switch f {
	case AtTerminal:
		return "at a terminal"
	case NoTerminal:
		return "without a terminal"
	case Detached:
		return "detached"
	case Unattended:
		return "by the agent"
	}
	return "unknown"
}

// canAsk says whether a question can be answered where the restart is filed; yes answers
// them all.
func (f Filing) canAsk(yes bool) bool { return f != NoTerminal || yes }

// OptionError is an option the request cannot have, in one line naming it and the fix.
// Flag is the option's flag name without its dash, so that a job's meta can name its own
// key instead.
type OptionError struct {
	Flag string
	Text string
}

func (e *OptionError) Error() string { return e.Text }

// Resolved is a request resolved: the spec to plan, and notes on defaults that adapted to
// where it was filed (which the plan shows).
type Resolved struct {
	Spec  Spec
	Notes []string
}

// Resolve applies the defaults and checks every option in a fixed order, so that a request
// with several mistakes always names the same one. It is the one place where a restart's
// options get their defaults and checks; the planner then resolves what needs the cluster
// (-health auto, the groups' update blocks, -drain auto).
func (o Options) Resolve(f Filing) (Resolved, error) {
	s := DefaultSpec()
	var notes []string
	errs := o.apply(&s, f)
	if len(errs) > 0 {
		return Resolved{}, errs[0]
	}
	if !o.OnError.Set {
		s.OnError = OnErrorAsk
		if f == NoTerminal && !o.Yes || f == Unattended {
			s.OnError = OnErrorFail
		}
		if f == NoTerminal && !o.Yes {
			notes = append(notes, `-on-error fail: there is no terminal to ask "Ignore them and continue?" at; give -on-error fail to say so, or -detach to answer with nomad-restart answer`)
		}
	}
	if err := o.combinations(); err != nil {
		return Resolved{}, err
	}
	return Resolved{Spec: s, Notes: notes}, nil
}

// DefaultSpec is a restart's options before any is given: `nomad job restart`'s defaults
// (batches of 1, no wait, ask on errors) and ours (the health gate decided at planning, a
// five-minute deadline, the drain decided at planning).
func DefaultSpec() Spec {
	return Spec{
		BatchSizes:      []BatchSize{{N: 1}},
		OnError:         OnErrorAsk,
		Health:          HealthAuto,
		HealthyDeadline: DefaultHealthyDeadline,
	}
}

// Apply sets onto s the options that o gives, and only those, checking each: a job's meta
// overrides a fleet's options this way, option by option. It returns every refusal, in the
// fixed order of Resolve; s keeps what was valid.
func (o Options) Apply(s *Spec, f Filing) []error {
	return o.apply(s, f)
}

func (o Options) apply(s *Spec, f Filing) []error {
	r := &refusals{}
	fail, given := r.add, r.given
	canAsk := f.canAsk(o.Yes)
	parseGiven(r, o.BatchSize, "batch-size", ParseBatchSizes, func(sizes []BatchSize) { s.BatchSizes = sizes })
	if given(o.BatchWait, "batch-wait") {
		d, ask, err := ParseBatchWait(o.BatchWait.Text)
		switch {
		case err != nil:
			fail(err)
		case ask && !canAsk:
			fail(&ValueError{Flag: "batch-wait", Value: o.BatchWait.Text, Reason: `"ask" needs an interactive terminal; add -yes, -detach (then answer with nomad-restart answer), or give a duration like 30s`})
		default:
			s.BatchWait, s.BatchWaitAsk = d, ask
		}
	}
	if given(o.OnError, "on-error") {
		v, err := ParseOnError(o.OnError.Text)
		switch {
		case err != nil:
			fail(err)
		case v == OnErrorAsk && !canAsk:
			fail(&ValueError{Flag: "on-error", Value: o.OnError.Text, Reason: `"ask" needs an interactive terminal; give -on-error fail, add -yes, or -detach (then answer with nomad-restart answer)`})
		default:
			s.OnError = v
		}
	}
	for _, l := range []struct {
		flag, what string
		values     []string
		to         *[]string
	}{
		{"group", "a task group of the job", o.Groups, &s.Groups},
		{"task", "a task of the job", o.Tasks, &s.Tasks},
		{"node", "a node's ID prefix or name", o.Nodes, &s.Nodes},
		{"datacenter", "a datacenter", o.Datacenters, &s.Datacenters},
	} {
		if len(l.values) == 0 {
			continue
		}
		names, err := names(l.flag, l.what, l.values)
		if err != nil {
			fail(err)
			continue
		}
		*l.to = names
	}
	if o.AllTasks {
		s.AllTasks = true
	}
	if o.Reschedule {
		s.Reschedule = true
	}
	if o.NoShutdownDelay {
		s.NoShutdownDelay = true
	}
	if o.Yes {
		s.Yes = true
	}
	parseGiven(r, o.Health, "health", ParseHealthMode, func(h HealthMode) { s.Health = h })
	parseGiven(r, o.HealthyDeadline, "healthy-deadline", ParseHealthyDeadline, func(d time.Duration) {
		s.HealthyDeadline, s.HealthyDeadlineGiven = d, true
	})
	parseGiven(r, o.MinHealthyTime, "min-healthy-time", func(text string) (time.Duration, error) {
		deadline := s.HealthyDeadline
		if deadline <= 0 {
			deadline = DefaultHealthyDeadline
		}
		return ParseMinHealthyTime(text, deadline)
	}, func(d time.Duration) { s.MinHealthyTime, s.MinHealthyTimeGiven = d, true })
	parseGiven(r, o.MaxUnavailable, "max-unavailable", ParseMaxUnavailable, func(mu BatchSize) { s.MaxUnavailable = &mu })
	if given(o.Filter, "filter") {
		s.Filter = strings.TrimSpace(o.Filter.Text)
	}
	if o.UnhealthyFirst {
		s.UnhealthyFirst = true
	}
	if given(o.Drain, "drain") {
		if d, given, err := ParseDrain(o.Drain.Text); err != nil {
			fail(err)
		} else {
			s.Drain, s.DrainGiven = d, given
		}
	}
	if len(o.DrainUntil) > 0 {
		// Given, they replace what s had (a fleet's, under a job's meta).
		s.DrainUntil = nil
		for _, v := range o.DrainUntil {
			ev, err := ParseDrainUntil(v)
			if err != nil {
				fail(err)
				continue
			}
			if !slices.Contains(s.DrainUntil, ev) {
				s.DrainUntil = append(s.DrainUntil, ev)
			}
		}
	}
	for _, v := range o.BalancerRefresh {
		key, d, err := ParseBalancerRefresh(v)
		if err != nil {
			fail(err)
			continue
		}
		s.BalancerRefresh = maps.Clone(s.BalancerRefresh)
		if s.BalancerRefresh == nil {
			s.BalancerRefresh = map[string]time.Duration{}
		}
		s.BalancerRefresh[key] = d
	}
	parseGiven(r, o.Surge, "surge", ParseSurge, func(n int) { s.Surge = n })
	if o.SurgeIgnoreScaling {
		s.SurgeIgnoreScaling = true
	}
	for _, v := range []struct {
		flag string
		v    Value
	}{{"gate-delay", o.GateDelay}, {"gate-interval", o.GateInterval}, {"gate-count", o.GateCount},
		{"gate-failure-limit", o.GateFailureLimit}, {"gate-error-limit", o.GateErrorLimit}, {"gate-no-data", o.GateNoData}} {
		given(v.v, v.flag)
	}
	if len(r.errs) == 0 && (len(o.Gates) > 0 || o.gatePolicyGiven()) {
		if g, err := o.gates(); err != nil {
			fail(err)
		} else {
			s.Gates = g
		}
	}
	return r.errs
}

// refusals collects what apply refuses, in its fixed order.
type refusals struct{ errs []error }

func (r *refusals) add(err error) { r.errs = append(r.errs, err) }

// given says whether v was given a value to parse; given empty, it is refused here, in the
// words of the option's own refusal.
func (r *refusals) given(v Value, flag string) bool {
	if !v.Set {
		return false
	}
	if strings.TrimSpace(v.Text) == "" {
		r.add(&ValueError{Flag: flag, Value: v.Text, Reason: "it is empty; " + emptyHint(flag)})
		return false
	}
	return true
}

// parseGiven parses v with parse when it is given and hands its value to set; a value parse
// refuses is one more refusal instead.
func parseGiven[T any](r *refusals, v Value, flag string, parse func(string) (T, error), set func(T)) {
	if !r.given(v, flag) {
		return
	}
	x, err := parse(v.Text)
	if err != nil {
		r.add(err)
		return
	}
	set(x)
}

// OptionFlags are the flags of `run` that Options holds (their values are checked by
// Resolve, an empty one too): the rest of run's flags are the command's own.
func OptionFlags() []string {
	return []string{"batch-size", "batch-wait", "group", "task", "all-tasks", "reschedule",
		"no-shutdown-delay", "on-error", "yes", "health", "healthy-deadline", "min-healthy-time",
		"max-unavailable", "filter", "node", "datacenter", "unhealthy-first", "surge",
		"surge-ignore-scaling", "drain", "drain-until", "balancer-refresh", "gate", "gate-delay", "gate-interval", "gate-count",
		"gate-failure-limit", "gate-error-limit", "gate-no-data", "gate-dry-run"}
}

// emptyHint is what to give an option found empty.
func emptyHint(flag string) string {
	switch flag {
	case "batch-size":
		return "give a number of allocations like 2, or a percentage like 25%"
	case "batch-wait":
		return `give a duration with a unit like 10s or 2m, or "ask"`
	case "on-error":
		return `valid options are "ask" and "fail"`
	case "health":
		return `valid options are "auto" (default), "checks", "running" and "none"`
	case "healthy-deadline":
		return "give a positive duration like 5m, or leave it out for the group's update block"
	case "min-healthy-time":
		return "give a duration like 10s, or 0, or leave it out for the group's update block"
	case "max-unavailable":
		return "give a number of allocations like 1, or a percentage of each group like 25%"
	case "filter":
		return `give a filter expression on allocations like 'NodeName == "web-1"', or leave it out to restart every allocation`
	case "surge":
		return "give the number of extra allocations per group, 1 or more"
	case "drain":
		return fmt.Sprintf("give a duration from 0 (no drain) to %s, such as 2s, or auto", MaxDrain)
	case "gate-delay", "gate-interval":
		return "give a duration like 10s"
	case "gate-no-data":
		return `give "fail" (no data is no evidence) or "pass"`
	}
	return "give a whole number, 0 or more" // the gates' counts
}

// combinations refuses the options that cannot go together, each with its fix.
func (o Options) combinations() error {
	switch {
	case o.AllTasks && len(o.Tasks) > 0:
		return &OptionError{Flag: "all-tasks", Text: "The -all-tasks option cannot be used with -task: drop one of them"}
	case o.Reschedule && len(o.Tasks) > 0:
		return &OptionError{Flag: "reschedule", Text: "The -reschedule option cannot be used with -task: a rescheduled allocation replaces all its tasks; drop -task or -reschedule"}
	case o.SurgeIgnoreScaling && !o.Surge.Set:
		return &OptionError{Flag: "surge-ignore-scaling", Text: "The -surge-ignore-scaling option needs -surge: add -surge n, or drop it"}
	case o.gatePolicyGiven() && len(o.Gates) == 0:
		return &OptionError{Flag: "gate", Text: "The -gate-* options need -gate: add -gate 'NAME: QUERY OP NUMBER', or drop them"}
	}
	return nil
}

// names checks a repeatable option's values: each names something, so an empty one (an
// unset variable) is refused rather than matching nothing or everything.
func names(flag, what string, values []string) ([]string, error) {
	out := make([]string, 0, len(values))
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			return nil, &ValueError{Flag: flag, Value: v, Reason: "it is empty; give " + what + ", or drop -" + flag}
		}
		out = append(out, strings.TrimSpace(v))
	}
	return out, nil
}

// gatePolicyGiven says whether any of the gates' measuring options was given.
func (o Options) gatePolicyGiven() bool {
	return o.GateDelay.Set || o.GateInterval.Set || o.GateCount.Set || o.GateFailureLimit.Set ||
		o.GateErrorLimit.Set || o.GateNoData.Set || o.GateDryRun
}

// gates reads -gate and how gates measure, parsed once here into the typed gates the record
// keeps.
func (o Options) gates() (*Gates, error) {
	if len(o.Gates) == 0 {
		return nil, nil // combinations names the missing -gate
	}
	specs := make([]string, 0, len(o.Gates))
	for _, g := range o.Gates {
		if strings.TrimSpace(g) == "" {
			return nil, &ValueError{Flag: "gate", Value: g, Reason: "it is empty; give a gate like 'errors: sum(rate(http_errors[1m])) < 1', or drop -gate"}
		}
		specs = append(specs, strings.TrimSpace(g))
	}
	typed, err := gate.ParseAll(specs)
	if err != nil {
		return nil, &OptionError{Flag: "gate", Text: "Invalid -gate value: " + firstLine(err.Error())}
	}
	p := gate.DefaultPolicy()
	for _, d := range []struct {
		flag string
		v    Value
		to   *time.Duration
	}{{"gate-delay", o.GateDelay, &p.Delay}, {"gate-interval", o.GateInterval, &p.Interval}} {
		if !d.v.Set {
			continue
		}
		v, err := ParseDuration(d.flag, d.v.Text, "give a duration like 10s")
		if err != nil {
			return nil, err
		}
		*d.to = v
	}
	for _, c := range []struct {
		flag string
		v    Value
		to   *int
	}{{"gate-count", o.GateCount, &p.Count}, {"gate-failure-limit", o.GateFailureLimit, &p.FailureLimit}, {"gate-error-limit", o.GateErrorLimit, &p.ErrorLimit}} {
		if !c.v.Set {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSpace(c.v.Text))
		if err != nil || v < 0 {
			return nil, &ValueError{Flag: c.flag, Value: c.v.Text, Reason: "give a whole number, 0 or more"}
		}
		*c.to = v
	}
	if o.GateNoData.Set {
		nd, err := gate.ParseNoData(o.GateNoData.Text)
		if err != nil {
			return nil, &ValueError{Flag: "gate-no-data", Value: o.GateNoData.Text, Reason: `give "fail" (no data is no evidence) or "pass"`}
		}
		p.NoData = nd
	}
	p.DryRun = o.GateDryRun
	if err := p.Validate(); err != nil {
		return nil, &OptionError{Flag: "gate", Text: "Invalid gate options: " + o.policyProblems(err)}
	}
	return &Gates{Specs: specs, Typed: typed, Policy: p}, nil
}

// policyProblems words the gate policy's problems with the flags that gave each setting and
// their values as typed (or "default"): `-gate-count "0": count is 0: ...`.
func (o Options) policyProblems(err error) string {
	var pe *gate.PolicyError
	if !errors.As(err, &pe) {
		return firstLine(err.Error())
	}
	typed := map[string]Value{"count": o.GateCount, "delay": o.GateDelay, "interval": o.GateInterval,
		"failure-limit": o.GateFailureLimit, "error-limit": o.GateErrorLimit, "no-data": o.GateNoData}
	parts := make([]string, len(pe.Problems))
	for i, p := range pe.Problems {
		v := "default"
		if t := typed[p.Setting]; t.Set {
			v = strconv.Quote(t.Text)
		}
		parts[i] = fmt.Sprintf("-gate-%s %s: %s", p.Setting, v, p.Text)
	}
	return strings.Join(parts, "; ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
