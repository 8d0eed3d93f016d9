package gate

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const errorsQuery = `sum(rate(http_requests_total{job="{{job}}",code=~"5.."}[30s])) / sum(rate(http_requests_total{job="{{job}}"}[30s]))`

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
	}{
		{"errors: " + errorsQuery + " < 0.02", Spec{Name: "errors", PromQL: errorsQuery, Op: OpLess, Threshold: 0.02}},
		// Operators inside the query stay in it: the comparison is the last one.
		{"ratio: a > b < 0.5", Spec{Name: "ratio", PromQL: "a > b", Op: OpLess, Threshold: 0.5}},
		{"eq: up == 1 != 0", Spec{Name: "eq", PromQL: "up == 1", Op: OpNotEqual, Threshold: 0}},
		{"up: sum(up{job=\"web\"}) == 3", Spec{Name: "up", PromQL: `sum(up{job="web"})`, Op: OpEqual, Threshold: 3}},
		{"drift: delta(x[5m]) >= -1.5e-3", Spec{Name: "drift", PromQL: "delta(x[5m])", Op: OpGreaterEqual, Threshold: -0.0015}},
		{"big: x <= 1E6", Spec{Name: "big", PromQL: "x", Op: OpLessEqual, Threshold: 1e6}},
		{"plus: x > +5", Spec{Name: "plus", PromQL: "x", Op: OpGreater, Threshold: 5}},
		{"tight: up<1", Spec{Name: "tight", PromQL: "up", Op: OpLess, Threshold: 1}},
		{"  lat_p99 :  histogram_quantile(0.99, sum by (le) (rate(h_bucket[1m]))) < 0.25   ", Spec{Name: "lat_p99", PromQL: "histogram_quantile(0.99, sum by (le) (rate(h_bucket[1m])))", Op: OpLess, Threshold: 0.25}},
		{"rec-1: job:errors:rate5m > 0", Spec{Name: "rec-1", PromQL: "job:errors:rate5m", Op: OpGreater, Threshold: 0}},
		{"sub: max_over_time(rate(x[1m])[5m:30s]) < 1", Spec{Name: "sub", PromQL: "max_over_time(rate(x[1m])[5m:30s])", Op: OpLess, Threshold: 1}},
		{"tab:\tx{a=\"b: c\"} >= 2", Spec{Name: "tab", PromQL: `x{a="b: c"}`, Op: OpGreaterEqual, Threshold: 2}},
		{"spaced: x{alloc_id=~\"{{ allocs }}\", n=~\"{{alloc_names}}\", b=\"{{batch}}\"} > 0", Spec{Name: "spaced", PromQL: `x{alloc_id=~"{{ allocs }}", n=~"{{alloc_names}}", b="{{batch}}"}`, Op: OpGreater, Threshold: 0}},
		{"multi: sum(x)\n  / sum(y) < 0.1", Spec{Name: "multi", PromQL: "sum(x)\n  / sum(y)", Op: OpLess, Threshold: 0.1}},
	}
	for _, tt := range tests {
		t.Run(tt.want.Name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q)\n got %#v\nwant %#v", tt.in, got, tt.want)
			}
			// String writes the flag's form, which reads back the same.
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Fatalf("Parse(%q) = %#v, %v; want %#v", got.String(), again, err, got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"errors: up", `gate "errors": no comparison at the end; write NAME: QUERY OP NUMBER with OP one of < <= > >= == !=`},
		{`x: up{job="{{jobb}}"} < 1`, `gate "x": unknown template variable {{jobb}}; use one of {{job}} {{namespace}} {{group}} {{batch}} {{allocs}} {{alloc_names}}`},
		{"sum(up) < 1", `gate "sum(up) < 1": no name; write NAME: QUERY OP NUMBER`},
		// A recording rule's colons are not a name's: the name needs ": ".
		{"job:errors:rate5m < 0.1", `gate "job:errors:rate5m < 0.1": no name`},
		{": up < 1", "no name"},
		{"my gate: up < 1", `gate "my gate": bad name; use letters, digits, - and _ only`},
		{"gate.1: up < 1", `gate "gate.1": bad name`},
		{"é: up < 1", `gate "é": bad name`},
		{`x: sum(x{a="b: c"}) < 1 and on() vector(1)`, `gate "x": no comparison at the end`},
		{"x: up > bool 1", `gate "x": no comparison at the end`},
		{"x: up > abc", `gate "x": "abc" after > is not a number; write NAME: QUERY OP NUMBER`},
		{"x: up > 1,5", `"1,5" after > is not a number`},
		{"x: up > 0.1.2", `"0.1.2" after > is not a number`},
		{"x: up > NaN", `gate "x": the threshold must be a finite number, not NaN`},
		{"x: up < +Inf", `the threshold must be a finite number, not +Inf`},
		{"x: < 1", `gate "x": no query before < 1`},
		{"x:   >= 1  ", `gate "x": no query before >= 1`},
		{"x: up{job=\"{{.Job}}\"} < 1", `unknown template variable {{.Job}}`},
		{"x: up{job=\"{{ job_name }}\"} < 1", `unknown template variable {{ job_name }}`},
		{"x: up{job=\"{{job\"} < 1", `gate "x": "{{job\"}" has no closing }}`},
		{"", "no name"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error containing %q", tt.in, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%q) = %q, want it to contain %q", tt.in, err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("Parse(%q)'s error has more than one line: %q", tt.in, err)
			}
		})
	}
}

func TestParseAll(t *testing.T) {
	specs, err := ParseAll([]string{"a: x < 1", "b: y > 2"})
	if err != nil || len(specs) != 2 || specs[0].Name != "a" || specs[1].Name != "b" {
		t.Fatalf("ParseAll = %v, %v", specs, err)
	}
	if _, err := ParseAll([]string{"a: x < 1", "b: y > 2", "a: z == 0"}); err == nil || err.Error() != `gate "a" is given twice; give each gate its own name` {
		t.Fatalf("duplicate names: err = %v", err)
	}
	if _, err := ParseAll([]string{"a: x < 1", "b: y"}); err == nil || !strings.Contains(err.Error(), `gate "b": no comparison`) {
		t.Fatalf("a bad gate among good ones: err = %v", err)
	}
	if specs, err := ParseAll(nil); err != nil || len(specs) != 0 {
		t.Fatalf("ParseAll(nil) = %v, %v", specs, err)
	}
}

func TestParseMeta(t *testing.T) {
	got, err := ParseMeta("errors", errorsQuery+" < 0.02")
	if err != nil || got != (Spec{Name: "errors", PromQL: errorsQuery, Op: OpLess, Threshold: 0.02}) {
		t.Fatalf("ParseMeta = %#v, %v", got, err)
	}
	// A recording rule's name is a query, not a gate's name.
	if got, err := ParseMeta("rec", "job:errors:rate5m < 0.1"); err != nil || got.PromQL != "job:errors:rate5m" {
		t.Fatalf("ParseMeta(recording rule) = %#v, %v", got, err)
	}
	bad := []struct{ name, value, want string }{
		{"errors", "up", `gate "errors": no comparison at the end; write QUERY OP NUMBER with OP one of < <= > >= == != (job meta nomad-restart.gate.errors)`},
		{"a.b", "up < 1", `gate "a.b" (job meta nomad-restart.gate.a.b): bad name; use letters, digits, - and _ only in the key`},
		{"", "up < 1", `bad name`},
		{"errors", "errors: up < 1", `gate "errors" (job meta nomad-restart.gate.errors): the value starts with a name; in job meta the key names the gate: write QUERY OP NUMBER`},
		{"x", `up{job="{{jobb}}"} < 1`, `gate "x": unknown template variable {{jobb}}; use one of {{job}}`},
		{"x", "up > 1e", `gate "x": "1e" after > is not a number; write QUERY OP NUMBER`},
	}
	for _, tt := range bad {
		_, err := ParseMeta(tt.name, tt.value)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseMeta(%q, %q) = %v, want an error containing %q", tt.name, tt.value, err, tt.want)
		}
	}
}

func TestQueryFillsTheTemplate(t *testing.T) {
	ids := []string{"8d3a1c2e-4b5f-6a7b-8c9d-0e1f2a3b4c5d", "f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f"}
	names := []string{"web.api[0]", "web.api[10]"}
	v := Vars{Job: "web", Namespace: "prod", Group: "api", Batch: 2, AllocIDs: ids, AllocNames: names}
	s, err := Parse(`x: up{job="{{job}}",ns="{{ namespace }}",g="{{group}}",b="{{batch}}",id=~"{{allocs}}",n=~"{{  alloc_names  }}"} > 0`)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Query(v)
	want := `up{job="web",ns="prod",g="api",b="2",id=~"` + ids[0] + `|` + ids[1] + `",n=~"web\\.api\\[0\\]|web\\.api\\[10\\]"}`
	if got != want {
		t.Fatalf("Query\n got %s\nwant %s", got, want)
	}

	// What Prometheus reads: the string literal's value, a regexp it anchors at both ends.
	literals := regexp.MustCompile(`=~("[^"]*")`).FindAllStringSubmatch(got, -1)
	if len(literals) != 2 {
		t.Fatalf("found %d regexp matchers in %s", len(literals), got)
	}
	compile := func(literal string) *regexp.Regexp {
		t.Helper()
		re, err := strconv.Unquote(literal) // PromQL's string escapes are Go's
		if err != nil {
			t.Fatalf("%s is not a valid string literal: %v", literal, err)
		}
		return regexp.MustCompile("^(?:" + re + ")$")
	}
	idRE, nameRE := compile(literals[0][1]), compile(literals[1][1])
	for _, id := range ids {
		if !idRE.MatchString(id) {
			t.Errorf("{{allocs}} does not match %s", id)
		}
	}
	for _, other := range []string{"8d3a1c2e", ids[0] + "x", "00000000-4b5f-6a7b-8c9d-0e1f2a3b4c5d"} {
		if idRE.MatchString(other) {
			t.Errorf("{{allocs}} matches %s", other)
		}
	}
	for _, n := range names {
		if !nameRE.MatchString(n) {
			t.Errorf("{{alloc_names}} does not match %s", n)
		}
	}
	for _, other := range []string{"web.api[1]", "webXapi[0]", "web.api0", "web.api[0]x", "web.api[1]0", "web.api"} {
		if nameRE.MatchString(other) {
			t.Errorf("{{alloc_names}} matches %s", other)
		}
	}
}

func TestQueryEscapesForAString(t *testing.T) {
	s := Spec{Name: "x", PromQL: `up{job="{{job}}"}`, Op: OpLess, Threshold: 1}
	if got, want := s.Query(Vars{Job: `we"b\1`}), `up{job="we\"b\\1"}`; got != want {
		t.Fatalf("Query = %s, want %s", got, want)
	}
	// A Spec not made by Parse keeps an unknown variable as written.
	s.PromQL = `up{job="{{jobb}}"} + {{job}}`
	if got, want := s.Query(Vars{Job: "web"}), `up{job="{{jobb}}"} + {{job}}`; got != want {
		t.Fatalf("Query = %s, want %s", got, want)
	}
	// PromQL's own braces are left alone.
	s.PromQL = `sum by (code) (x{a="{"}) / {__name__="y"}`
	if got := s.Query(Vars{}); got != s.PromQL {
		t.Fatalf("Query = %s, want %s", got, s.PromQL)
	}
}

// TestEveryListedVariableIsKnown keeps the error message's list and Vars.value in step.
func TestEveryListedVariableIsKnown(t *testing.T) {
	for _, v := range strings.Fields(variableList) {
		if _, ok := (Vars{}).value(strings.Trim(v, "{}")); !ok {
			t.Errorf("%s is listed but not known", v)
		}
	}
}
