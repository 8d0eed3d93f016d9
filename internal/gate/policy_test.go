package gate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	want := Policy{Delay: 0, Interval: 10 * time.Second, Count: 3, FailureLimit: 0, ErrorLimit: 4, NoData: NoDataFail}
	if p != want {
		t.Fatalf("DefaultPolicy = %+v, want %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("the default policy is invalid: %v", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	with := func(f func(*Policy)) Policy { p := DefaultPolicy(); f(&p); return p }
	good := []Policy{
		with(func(p *Policy) { p.Count = 1; p.Interval = 0; p.ErrorLimit = 0 }),
		with(func(p *Policy) { p.Count = 1 }),
		with(func(p *Policy) { p.Delay = time.Minute; p.FailureLimit = 2; p.NoData = NoDataPass; p.DryRun = true }),
		with(func(p *Policy) { p.ErrorLimit = 0 }),
	}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := []struct {
		p    Policy
		want string
	}{
		{with(func(p *Policy) { p.Count = 0 }), "gate policy: count is 0: a gate takes at least 1 measurement"},
		{with(func(p *Policy) { p.Delay = -time.Second }), "delay is -1s: use 0 or more"},
		{with(func(p *Policy) { p.Interval = -time.Second }), "interval is -1s: use a positive interval such as 10s"},
		{with(func(p *Policy) { p.Interval = 0 }), "interval is 0 with count 3: the measurements need time between them"},
		{with(func(p *Policy) { p.Interval = 0; p.Count = 1 }), "interval is 0 with error limit 4: a failed query is tried again after the interval"},
		{with(func(p *Policy) { p.FailureLimit = -1 }), "failure limit is -1: use 0"},
		{with(func(p *Policy) { p.FailureLimit = 3 }), "failure limit 3 lets all 3 measurements fail, so no gate could fail: use a failure limit below the count, or a dry run to only watch"},
		{with(func(p *Policy) { p.ErrorLimit = -2 }), "error limit is -2: use 0"},
		{with(func(p *Policy) { p.NoData = 7 }), "no-data policy is NoDataPolicy(7): use fail or pass"},
		{Policy{}, "count is 0"},
	}
	for _, tt := range bad {
		err := tt.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want one line containing %q", tt.p, err, tt.want)
		}
	}
	// Every problem is named at once.
	err := Policy{Count: 0, ErrorLimit: -1, FailureLimit: -1}.Validate()
	if err == nil || strings.Count(err.Error(), ";") != 2 {
		t.Errorf("three problems: %v", err)
	}
}

func TestNoDataPolicy(t *testing.T) {
	for in, want := range map[string]NoDataPolicy{"fail": NoDataFail, "pass": NoDataPass, " Pass ": NoDataPass} {
		if got, err := ParseNoData(in); err != nil || got != want {
			t.Errorf("ParseNoData(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseNoData("ignore"); err == nil || err.Error() != `no-data policy "ignore": use fail (no data fails a measurement) or pass` {
		t.Errorf("ParseNoData(ignore): %v", err)
	}
	b, err := json.Marshal(Policy{Count: 1, NoData: NoDataPass})
	if err != nil || !strings.Contains(string(b), `"no_data":"pass"`) {
		t.Fatalf("JSON %s, %v", b, err)
	}
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil || p.NoData != NoDataPass {
		t.Fatalf("read back %+v, %v", p, err)
	}
	if err := json.Unmarshal([]byte(`{"no_data":"maybe"}`), &p); err == nil {
		t.Fatal("a bad no-data policy was read")
	}
	if _, err := json.Marshal(Policy{NoData: 9}); err == nil {
		t.Fatal("a bad no-data policy was written")
	}
}
