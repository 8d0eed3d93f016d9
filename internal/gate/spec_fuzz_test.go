package gate

import (
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
)

// gateSeeds are the -gate values of spec_test.go's tables.
func gateSeeds() []string {
	return []string{
		"errors: " + errorsQuery + " < 0.02", "ratio: a > b < 0.5", "eq: up == 1 != 0", "up: sum(up{job=\"web\"}) == 3",
		"drift: delta(x[5m]) >= -1.5e-3", "big: x <= 1E6", "plus: x > +5", "tight: up<1",
		"  lat_p99 :  histogram_quantile(0.99, sum by (le) (rate(h_bucket[1m]))) < 0.25   ",
		"rec-1: job:errors:rate5m > 0", "sub: max_over_time(rate(x[1m])[5m:30s]) < 1", "tab:\tx{a=\"b: c\"} >= 2",
		"spaced: x{alloc_id=~\"{{ allocs }}\", n=~\"{{alloc_names}}\", b=\"{{batch}}\"} > 0", "multi: sum(x)\n  / sum(y) < 0.1",
		"errors: up", `x: up{job="{{jobb}}"} < 1`, "sum(up) < 1", "job:errors:rate5m < 0.1", ": up < 1", "my gate: up < 1",
		"gate.1: up < 1", "é: up < 1", `x: sum(x{a="b: c"}) < 1 and on() vector(1)`, "x: up > bool 1", "x: up > abc",
		"x: up > 1,5", "x: up > 0.1.2", "x: up > NaN", "x: up < +Inf", "x: < 1", "x:   >= 1  ", "x: up{job=\"{{.Job}}\"} < 1",
		"x: up{job=\"{{ job_name }}\"} < 1", "x: up{job=\"{{job\"} < 1", "", "x: up > 0x1p-2", "x: up > 1_0", "x: a{{ < 1",
	}
}

// FuzzParseGate reads any -gate value: no panic or hang; a refusal is one line naming the
// gate (its name, or the whole value when it has none); an accepted gate has a valid name,
// a query with known variables only and a finite threshold, and its String reads back as
// the same gate.
func FuzzParseGate(f *testing.F) {
	for _, s := range gateSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fuzztest.Bound(t, "Parse", func() {
			spec, err := Parse(s)
			what := "-gate " + strconv.Quote(s)
			if err != nil {
				fuzztest.OneLine(t, what, err)
				if name, _, ok := cutName(s); ok {
					fuzztest.Names(t, what, err, name)
				} else {
					fuzztest.Names(t, what, err, strings.TrimSpace(s))
				}
				return
			}
			checkSpec(t, what, spec)
			if again, err := Parse(spec.String()); err != nil || again != spec {
				t.Errorf("%s = %#v, whose String %q reads back as %#v, %v", what, spec, spec.String(), again, err)
			}
		})
	})
}

// FuzzParseGateMeta reads any nomad-restart.gate.<name> key and value as a job's meta
// gives them: a refusal is one line naming the gate and its key; an accepted gate is
// valid, named by its key, and reads back from the -gate form.
func FuzzParseGateMeta(f *testing.F) {
	f.Add("errors", errorsQuery+" < 0.02")
	f.Add("rec", "job:errors:rate5m < 0.1")
	f.Add("errors", "up")
	f.Add("a.b", "up < 1")
	f.Add("", "up < 1")
	f.Add("errors", "errors: up < 1")
	f.Add("x", `up{job="{{jobb}}"} < 1`)
	f.Add("x", "up > 1e")
	f.Add("x", "a: b: c < 1")
	f.Fuzz(func(t *testing.T, name, value string) {
		fuzztest.Bound(t, "ParseMeta", func() {
			spec, err := ParseMeta(name, value)
			what := "meta " + strconv.Quote(MetaPrefix+name) + " = " + strconv.Quote(value)
			if err != nil {
				fuzztest.OneLine(t, what, err)
				fuzztest.Names(t, what, err, name, MetaPrefix+name)
				return
			}
			if spec.Name != name {
				t.Errorf("%s: the gate is named %q", what, spec.Name)
			}
			checkSpec(t, what, spec)
			if again, err := Parse(spec.String()); err != nil || again != spec {
				t.Errorf("%s = %#v, whose -gate form %q reads back as %#v, %v", what, spec, spec.String(), again, err)
			}
		})
	})
}

func checkSpec(t *testing.T, what string, spec Spec) {
	t.Helper()
	if !nameRE.MatchString(spec.Name) || spec.PromQL == "" || spec.PromQL != strings.TrimSpace(spec.PromQL) ||
		math.IsNaN(spec.Threshold) || math.IsInf(spec.Threshold, 0) || checkTemplate(spec.PromQL) != nil {
		t.Errorf("%s accepted as %#v", what, spec)
	}
	switch spec.Op {
	case OpLess, OpLessEqual, OpGreater, OpGreaterEqual, OpEqual, OpNotEqual:
	default:
		t.Errorf("%s accepted with the comparison %q", what, spec.Op)
	}
}

// literalRE finds a label matcher's string literal in a filled-in query.
var literalRE = regexp.MustCompile(`(\w+)=~?("(?:[^"\\]|\\.)*")`)

// FuzzGateQuery fills a gate's template with any job, namespace, group and allocations, as
// Nomad names them: each value lands inside its PromQL string as one literal that reads
// back as the value (a quote or a backslash cannot end the string early or change the
// query), and {{allocs}} and {{alloc_names}} are regexps that match exactly the batch's.
func FuzzGateQuery(f *testing.F) {
	f.Add("web", "prod", "api", 2, "8d3a1c2e-4b5f-6a7b-8c9d-0e1f2a3b4c5d", "web.api[0]", "web.api[10]")
	f.Add(`we"b\1`, "", "{{job}}", 0, "", "a|b", ".*")
	f.Add("}\"} or vector(1) #", "ns\n", "g`", -1, "x)(", "[", "\\")
	spec, err := Parse(`x: up{j="{{job}}",n="{{namespace}}",g="{{ group }}",b="{{batch}}",a=~"{{allocs}}",m=~"{{alloc_names}}"} < 1`)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, job, namespace, group string, batch int, id, name1, name2 string) {
		for _, s := range []string{job, namespace, group, id, name1, name2} {
			if !utf8.ValidString(s) {
				return // Nomad's names are UTF-8 (its API is JSON), and so is PromQL
			}
		}
		v := Vars{Job: job, Namespace: namespace, Group: group, Batch: batch, AllocIDs: []string{id}, AllocNames: []string{name1, name2}}
		fuzztest.Bound(t, "Query", func() { checkQuery(t, spec.Query(v), v) })
	})
}

func checkQuery(t *testing.T, q string, v Vars) {
	inner, ok := strings.CutPrefix(q, "up{")
	if !ok || !strings.HasSuffix(inner, "}") {
		t.Errorf("Query = %q: the selector's braces moved", q)
		return
	}
	found := literalRE.FindAllStringSubmatch(inner, -1)
	if len(found) != 6 || literalRE.ReplaceAllString(inner, "") != ",,,,,}" {
		t.Errorf("Query = %q: want 6 label matchers and nothing else", q)
		return
	}
	read := map[string]string{}
	for _, m := range found {
		s, err := strconv.Unquote(m[2]) // PromQL's string escapes are Go's
		if err != nil {
			t.Errorf("Query = %q: %s is not a string literal: %v", q, m[2], err)
			return
		}
		read[m[1]] = s
	}
	want := map[string]string{"j": v.Job, "n": v.Namespace, "g": v.Group, "b": strconv.Itoa(v.Batch)}
	for label, w := range want {
		if read[label] != w {
			t.Errorf("Query = %q: %s reads %q, want %q", q, label, read[label], w)
		}
	}
	checkAlternation(t, q, read["a"], v.AllocIDs)
	checkAlternation(t, q, read["m"], v.AllocNames)
}

// checkAlternation checks a regexp as Prometheus reads it (anchored at both ends) against
// the values it must match, and a few it must not.
func checkAlternation(t *testing.T, q, re string, values []string) {
	r, err := regexp.Compile("^(?:" + re + ")$")
	if err != nil {
		t.Errorf("Query = %q: the regexp %q does not compile: %v", q, re, err)
		return
	}
	for _, s := range values {
		if !r.MatchString(s) {
			t.Errorf("Query = %q: %q does not match %q", q, re, s)
		}
		for _, other := range []string{s + "x", "x" + s, strings.ToUpper(s) + "\x00"} {
			if r.MatchString(other) && !contains(values, other) {
				t.Errorf("Query = %q: %q matches %q, not one of %q", q, re, other, values)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FuzzGatePolicy reads any no-data policy and judges any policy's numbers: a refused
// no-data policy names the value; a policy Validate accepts can measure and fail (at least
// one measurement, time between measurements and retries, a failure limit below the
// count), and a refusal is one line.
func FuzzGatePolicy(f *testing.F) {
	f.Add("fail", int64(0), int64(10*time.Second), 3, 0, 4)
	f.Add(" Pass ", int64(time.Minute), int64(0), 1, 0, 0)
	f.Add("ignore", int64(-time.Second), int64(-time.Second), 0, -1, -2)
	f.Add("PASS", int64(0), int64(0), 3, 3, 4)
	f.Fuzz(func(t *testing.T, noData string, delay, interval int64, count, failureLimit, errorLimit int) {
		fuzztest.Bound(t, "the gate policy", func() {
			nd, err := ParseNoData(noData)
			var viaText NoDataPolicy
			textErr := viaText.UnmarshalText([]byte(noData))
			if (err == nil) != (textErr == nil) || nd != viaText {
				t.Errorf("ParseNoData(%q) = %v, %v; UnmarshalText reads %v, %v", noData, nd, err, viaText, textErr)
			}
			word := strings.ToLower(strings.TrimSpace(noData))
			if err != nil {
				fuzztest.OneLine(t, "no-data "+strconv.Quote(noData), err)
				fuzztest.Names(t, "no-data "+strconv.Quote(noData), err, noData)
			} else if (word == "pass") != (nd == NoDataPass) || (word != "pass" && word != "fail") {
				t.Errorf("ParseNoData(%q) = %v", noData, nd)
			}
			p := Policy{Delay: time.Duration(delay), Interval: time.Duration(interval), Count: count,
				FailureLimit: failureLimit, ErrorLimit: errorLimit, NoData: nd}
			if err := p.Validate(); err != nil {
				fuzztest.OneLine(t, "policy", err)
				var pe *PolicyError
				if !errors.As(err, &pe) || len(pe.Problems) == 0 {
					t.Errorf("Validate(%+v) = %v (%T), want a *PolicyError", p, err, err)
					return
				}
				for _, pr := range pe.Problems {
					switch pr.Setting {
					case "count", "delay", "interval", "failure-limit", "error-limit", "no-data":
					default:
						t.Errorf("Validate(%+v): a problem of the setting %q", p, pr.Setting)
					}
				}
				return
			}
			if p.Count < 1 || p.Delay < 0 || p.Interval < 0 || p.FailureLimit < 0 || p.FailureLimit >= p.Count ||
				p.ErrorLimit < 0 || (p.Interval == 0 && (p.Count > 1 || p.ErrorLimit > 0)) {
				t.Errorf("Validate accepted %+v", p)
			}
		})
	})
}

// FuzzMeasurementJSON decodes any stored measurement (a record's gate runs hold them): an
// error or a measurement, never a panic; a decoded one encodes and decodes to itself.
func FuzzMeasurementJSON(f *testing.F) {
	for _, m := range []Measurement{
		{Gate: "errors", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Query: "up", Value: 0.013, Verdict: VerdictPass},
		{Gate: "x", Value: math.Inf(1), Verdict: VerdictFail, Warnings: []string{"w"}},
		{Gate: "x", Value: math.Inf(-1)},
		{Gate: "y", Verdict: VerdictError, Error: "connection refused"},
	} {
		b, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"value":"NaN"}`))
	f.Add([]byte(`{"value":"1e400"}`))
	f.Add([]byte(`{"value":null}`))
	f.Add([]byte(`{"value":[1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzztest.Bound(t, "Measurement.UnmarshalJSON", func() {
			var m Measurement
			if err := json.Unmarshal(b, &m); err != nil {
				return
			}
			again, err := json.Marshal(m)
			if err != nil {
				t.Errorf("%q decodes to %+v, which does not encode: %v", b, m, err)
				return
			}
			var back Measurement
			if err := json.Unmarshal(again, &back); err != nil {
				t.Errorf("%q decodes to %+v, whose JSON %s does not decode: %v", b, m, again, err)
				return
			}
			same := back.Value == m.Value || (math.IsNaN(back.Value) && math.IsNaN(m.Value))
			back.Value, m.Value = 0, 0
			if !same || !back.At.Equal(m.At) || back.Gate != m.Gate || back.Query != m.Query || back.Verdict != m.Verdict ||
				back.Error != m.Error || len(back.Warnings) != len(m.Warnings) {
				t.Errorf("%q decodes to %+v, which reads back as %+v", b, m, back)
			}
		})
	})
}
