package restart

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestResolveDefaults: what a request that gives nothing becomes, from each place a restart
// is filed.
func TestResolveDefaults(t *testing.T) {
	cases := []struct {
		filing  Filing
		onError OnError
		noted   bool
	}{
		{AtTerminal, OnErrorAsk, false},
		{NoTerminal, OnErrorFail, true},
		{Detached, OnErrorAsk, false},
		{Unattended, OnErrorFail, false},
	}
	for _, tc := range cases {
		t.Run(tc.filing.String(), func(t *testing.T) {
			checkDefaults(t, Options{}, tc.filing, tc.onError, tc.noted)
		})
	}
	// -yes answers the questions, as Nomad's -yes does: without a terminal, errors are asked
	// about (and answered) as at one.
	t.Run("without a terminal, -yes", func(t *testing.T) {
		checkDefaults(t, Options{Yes: true}, NoTerminal, OnErrorAsk, false)
	})
	// The defaults the planner resolves further (auto health, the groups' update blocks,
	// the drain) are left for it, never decided here.
	res, _ := Options{}.Resolve(Detached)
	if s := res.Spec; s.Health != HealthAuto || s.MinHealthyTimeGiven || s.HealthyDeadlineGiven || s.DrainGiven {
		t.Fatalf("planning inputs decided before planning: %+v", s)
	}
}

// checkDefaults resolves o, which gives no option but -yes, filed from f: the spec is the
// default one with -on-error defaulting to onError, and a note says so when noted.
func checkDefaults(t *testing.T, o Options, f Filing, onError OnError, noted bool) {
	t.Helper()
	res, err := o.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultSpec()
	want.OnError, want.Yes = onError, o.Yes
	if !reflect.DeepEqual(res.Spec, want) {
		t.Fatalf("spec = %+v\nwant   %+v", res.Spec, want)
	}
	if (len(res.Notes) > 0) != noted {
		t.Fatalf("notes = %q, want a note: %v", res.Notes, noted)
	}
}

// TestResolveRefuses: every empty, out-of-range or unknown value gets one line naming the
// option, the value and the fix. Where the restart is filed changes none of them (only
// "ask", TestResolveAskNeedsATerminal), so each is filed detached.
func TestResolveRefuses(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"empty batch size", Options{BatchSize: Given("")}, `invalid -batch-size value "": it is empty; give a number`},
		{"batch size over 100%", Options{BatchSize: Given("101%")}, `invalid -batch-size value "101%": a percentage must be at most 100%`},
		{"batch size too large", Options{BatchSize: Given("99999999999999999999")}, "it is too large"},
		{"batch size zero", Options{BatchSize: Given("0")}, "greater than zero"},
		{"empty batch wait", Options{BatchWait: Given("")}, `invalid -batch-wait value "": it is empty; give a duration`},
		{"batch wait without a unit", Options{BatchWait: Given("10")}, "give a duration with a unit"},
		{"batch wait too long", Options{BatchWait: Given("99999999999h")}, `invalid -batch-wait value "99999999999h": it is too long`},
		{"negative batch wait", Options{BatchWait: Given("-1s")}, "must not be negative"},
		{"empty on-error", Options{OnError: Given("")}, `invalid -on-error value "": it is empty`},
		{"empty gate delay", Options{Gates: []string{"e: up < 1"}, GateDelay: Given("")}, `invalid -gate-delay value "": it is empty`},
		{"unknown health", Options{Health: Given("healthy")}, `invalid -health value "healthy"`},
		{"empty health", Options{Health: Given(" ")}, `invalid -health value " "`},
		{"zero deadline", Options{HealthyDeadline: Given("0s")}, "positive duration"},
		{"deadline too long", Options{HealthyDeadline: Given("9999999999h")}, "too long"},
		{"min healthy past the deadline", Options{HealthyDeadline: Given("1m"), MinHealthyTime: Given("1m")}, "shorter than -healthy-deadline (1m0s)"},
		{"max unavailable over 100%", Options{MaxUnavailable: Given("101%")}, "at most 100%"},
		{"empty filter", Options{Filter: Given("  ")}, `invalid -filter value "  ": it is empty; give a filter expression`},
		{"empty group", Options{Groups: []string{"web", ""}}, `invalid -group value "": it is empty; give a task group`},
		{"empty node", Options{Nodes: []string{" "}}, `invalid -node value " ": it is empty`},
		{"empty datacenter", Options{Datacenters: []string{""}}, `invalid -datacenter value ""`},
		{"surge zero", Options{Surge: Given("0")}, "1 or more"},
		{"surge not a number", Options{Surge: Given("many")}, "1 or more"},
		{"drain too long", Options{Drain: Given("6m")}, "from 0 (no drain) to 5m0s"},
		{"empty gate", Options{Gates: []string{""}}, `invalid -gate value ""`},
		{"bad gate", Options{Gates: []string{"errors: up"}}, "Invalid -gate value"},
		{"gate count negative", Options{Gates: []string{"e: up < 1"}, GateCount: Given("-1")}, `invalid -gate-count value "-1"`},
		{"gate options without a gate", Options{GateCount: Given("2")}, "need -gate"},
		{"all tasks with a task", Options{AllTasks: true, Tasks: []string{"main"}}, "-all-tasks option cannot be used with -task"},
		{"reschedule with a task", Options{Reschedule: true, Tasks: []string{"main"}}, "-reschedule option cannot be used with -task"},
		{"ignore scaling without surge", Options{SurgeIgnoreScaling: true}, "needs -surge"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.o.Resolve(Detached)
			checkResolveRefusal(t, err, tc.want)
		})
	}
}

// TestResolveAskNeedsATerminal: "ask" is refused where nothing can answer the question (a
// script without -yes) and accepted wherever something can.
func TestResolveAskNeedsATerminal(t *testing.T) {
	for name, o := range map[string]Options{
		"-batch-wait ask": {BatchWait: Given("ask")},
		"-on-error ask":   {OnError: Given("ask")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := o.Resolve(NoTerminal)
			checkResolveRefusal(t, err, `"ask" needs an interactive terminal`)
			for _, f := range []Filing{AtTerminal, Detached, Unattended} {
				if _, err := o.Resolve(f); err != nil {
					t.Errorf("filed %s: %v", f, err)
				}
			}
			o.Yes = true
			if _, err := o.Resolve(NoTerminal); err != nil {
				t.Errorf("filed %s with -yes: %v", NoTerminal, err)
			}
		})
	}
}

// checkResolveRefusal: err is the one-line refusal, containing want, of an error type that names
// the option.
func checkResolveRefusal(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("err is not one line: %q", err)
	}
	var ve *ValueError
	var oe *OptionError
	if !errors.As(err, &ve) && !errors.As(err, &oe) {
		t.Fatalf("err %T names no option", err)
	}
}

// TestResolveGivesWhatWasAsked: each option given lands in the spec, typed.
func TestResolveGivesWhatWasAsked(t *testing.T) {
	o := Options{
		BatchSize: Given("1,25%"), BatchWait: Given("30s"), Groups: []string{" web "},
		Reschedule: true, NoShutdownDelay: true, OnError: Given("fail"), Health: Given("CHECKS"),
		HealthyDeadline: Given("2m"), MinHealthyTime: Given("10s"), MaxUnavailable: Given("50%"),
		Filter: Given(` NodeName == "a" `), Nodes: []string{"n1"}, Datacenters: []string{"dc1"},
		UnhealthyFirst: true, Surge: Given("2"), SurgeIgnoreScaling: true, Drain: Given("0"),
		Gates: []string{"errors: sum(up) < 1"}, GateCount: Given("5"), GateInterval: Given("1s"), GateDryRun: true,
	}
	res, err := o.Resolve(NoTerminal)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Spec
	mu := BatchSize{N: 50, Percent: true}
	want := Spec{
		BatchSizes: []BatchSize{{N: 1}, {N: 25, Percent: true}}, BatchWait: 30 * time.Second,
		Groups: []string{"web"}, Reschedule: true, NoShutdownDelay: true, OnError: OnErrorFail,
		Health: HealthChecks, HealthyDeadline: 2 * time.Minute, HealthyDeadlineGiven: true,
		MinHealthyTime: 10 * time.Second, MinHealthyTimeGiven: true, MaxUnavailable: &mu,
		Filter: `NodeName == "a"`, Nodes: []string{"n1"}, Datacenters: []string{"dc1"},
		UnhealthyFirst: true, Surge: 2, SurgeIgnoreScaling: true, DrainGiven: true,
		Gates: s.Gates,
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("spec = %+v\nwant   %+v", s, want)
	}
	if len(res.Notes) > 0 {
		t.Fatalf("notes %q: -on-error was given", res.Notes)
	}
	g := s.Gates
	if g == nil || len(g.Typed) != 1 || g.Typed[0].Name != "errors" || g.Policy.Count != 5 || g.Policy.Interval != time.Second || !g.Policy.DryRun {
		t.Fatalf("gates = %+v", g)
	}
	// Typed once, and read back typed from the record's JSON.
	b, _ := json.Marshal(g)
	var back Gates
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if typed, err := back.Parsed(); err != nil || !reflect.DeepEqual(typed, g.Typed) {
		t.Fatalf("gates from JSON: %v %+v", err, typed)
	}
	// A record from a version that kept only the text is parsed when read.
	old := Gates{Specs: g.Specs, Policy: g.Policy}
	if typed, err := old.Parsed(); err != nil || !reflect.DeepEqual(typed, g.Typed) {
		t.Fatalf("gates of an older record: %v %+v", err, typed)
	}
}

// TestApplyCollectsEveryRefusal: a job's meta is checked option by option, every problem
// named, the valid ones kept.
func TestApplyCollectsEveryRefusal(t *testing.T) {
	s := DefaultSpec()
	errs := Options{BatchSize: Given("0"), BatchWait: Given("1m"), Health: Given("x")}.Apply(&s, Detached)
	if len(errs) != 2 {
		t.Fatalf("errs = %v, want the batch size's and the health's", errs)
	}
	if s.BatchWait != time.Minute || len(s.BatchSizes) != 1 || s.BatchSizes[0].N != 1 {
		t.Fatalf("spec after Apply: %+v", s)
	}
}

// TestValueJSON: the page's API gives options as strings (or numbers); absent and null are
// not given, "" is given empty.
func TestValueJSON(t *testing.T) {
	var o Options
	if err := json.Unmarshal([]byte(`{"BatchSize": 2, "Health": "", "OnError": null}`), &o); err != nil {
		t.Fatal(err)
	}
	if o.BatchSize != Given("2") || o.Health != Given("") || o.OnError.Set || o.Drain.Set {
		t.Fatalf("options = %+v", o)
	}
	if err := json.Unmarshal([]byte(`{"BatchSize": true}`), &o); err == nil {
		t.Fatal("a boolean batch size was read")
	}
}

// FuzzResolve: whatever is typed into any option, Resolve ends without a panic, and a
// refusal is one line naming the option (a flag) and the value when the value is the
// problem.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{"", " ", "1", "25%", "101%", "0", "ask", "fail", "10s", "99999999999h", "-1s", "auto", "checks", "1,25%", "x", "\x00", "1e309", "9223372036854775808"} {
		f.Add(seed, 0)
	}
	f.Fuzz(func(t *testing.T, v string, which int) {
		o := Options{Gates: []string{"errors: sum(up) < 1"}}
		if which%3 == 1 {
			o.DrainUntil = []string{v}
		} else if which%3 == 2 {
			o.BalancerRefresh = []string{v}
		}
		fields := []*Value{&o.BatchSize, &o.BatchWait, &o.OnError, &o.Health, &o.HealthyDeadline,
			&o.MinHealthyTime, &o.MaxUnavailable, &o.Filter, &o.Surge, &o.Drain, &o.GateDelay,
			&o.GateInterval, &o.GateCount, &o.GateFailureLimit, &o.GateErrorLimit, &o.GateNoData}
		if which < 0 {
			which = -which
		}
		*fields[which%len(fields)] = Given(v)
		for _, filing := range []Filing{AtTerminal, NoTerminal, Detached, Unattended} {
			res, err := o.Resolve(filing)
			if err == nil {
				if len(res.Spec.BatchSizes) == 0 || res.Spec.OnError == "" || res.Spec.Health == "" {
					t.Fatalf("accepted %q into an incomplete spec %+v", v, res.Spec)
				}
				continue
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Fatalf("refusal of %q is not one line: %q", v, msg)
			}
			var ve *ValueError
			if errors.As(err, &ve) && !strings.Contains(msg, "-"+ve.Flag) {
				t.Fatalf("refusal of %q names no option: %q", v, msg)
			}
		}
	})
}

// TestRecordZeroTimesJSON: a zero time is written, as the JSON outputs' schemas require
// ("0001-01-01T00:00:00Z"), and reads back zero; a record reads back as it was written.
func TestRecordZeroTimesJSON(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := Record{ID: "r1", Status: StatusRunning, StartTime: start, CreateTime: start, ModifyTime: start,
		Allocs: []AllocProgress{{ID: "a1", StartTime: start, Before: &Observation{Restarts: map[string]uint64{"web": 1}}}},
		Surge:  []SurgeGroup{{Group: "web", UpTime: start}},
		Events: []Event{{Time: start, Message: "started"}},
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"NextBatchAt", "EndTime", "LastEventTime", "DownTime"} {
		if !strings.Contains(string(b), `"`+field+`":"0001-01-01T00:00:00Z"`) {
			t.Errorf("zero %s not written: %s", field, b)
		}
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Allocs, rec.Allocs) || !reflect.DeepEqual(back.Surge, rec.Surge) || !back.EndTime.IsZero() ||
		!back.NextBatchAt.IsZero() || !back.StartTime.Equal(start) || !back.Allocs[0].Before.LastEventTime.IsZero() {
		t.Fatalf("read back\n%+v\nwritten\n%+v", back, rec)
	}
}
