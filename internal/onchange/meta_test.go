package onchange

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// groupOptions reads the options of group "web" from meta written at group level.
func groupOptions(meta map[string]string) options {
	return readOptions("web", groupMeta(nil, meta))
}

func TestReadOptionsDefaults(t *testing.T) {
	o := groupOptions(map[string]string{"other": "x", KeyOnChange: "auto"})
	if len(o.problems) != 0 {
		t.Fatalf("problems = %v, want none", o.problems)
	}
	want := restart.Spec{
		Groups:          []string{"web"},
		BatchSizes:      []restart.BatchSize{{N: 1}},
		OnError:         restart.OnErrorFail,
		Health:          restart.HealthAuto,
		HealthyDeadline: restart.DefaultHealthyDeadline,
	}
	if !reflect.DeepEqual(o.spec, want) {
		t.Errorf("spec = %+v, want %+v", o.spec, want)
	}
	if o.debounce != DefaultDebounce {
		t.Errorf("debounce = %s, want %s", o.debounce, DefaultDebounce)
	}
}

func TestReadOptionsValid(t *testing.T) {
	mu := restart.BatchSize{N: 25, Percent: true}
	tests := []struct {
		name  string
		meta  map[string]string
		check func(o options) bool
	}{
		{"batch size", map[string]string{KeyBatchSize: "2"}, func(o options) bool {
			return reflect.DeepEqual(o.spec.BatchSizes, []restart.BatchSize{{N: 2}})
		}},
		{"progressive batch sizes", map[string]string{KeyBatchSize: "1,25%"}, func(o options) bool {
			return reflect.DeepEqual(o.spec.BatchSizes, []restart.BatchSize{{N: 1}, {N: 25, Percent: true}})
		}},
		{"batch wait", map[string]string{KeyBatchWait: "30s"}, func(o options) bool { return o.spec.BatchWait == 30*time.Second }},
		// A rollout's questions are answered with `nomad-restart answer`, as a detached run's.
		{"batch wait ask", map[string]string{KeyBatchWait: "ASK"}, func(o options) bool { return o.spec.BatchWaitAsk }},
		{"on-error ask", map[string]string{KeyOnError: "ask"}, func(o options) bool { return o.spec.OnError == restart.OnErrorAsk }},
		{"health, any case", map[string]string{KeyHealth: " Checks "}, func(o options) bool { return o.spec.Health == restart.HealthChecks }},
		{"healthy deadline", map[string]string{KeyHealthyDeadline: "10m"}, func(o options) bool {
			return o.spec.HealthyDeadline == 10*time.Minute && o.spec.HealthyDeadlineGiven
		}},
		{"min healthy time under a given deadline", map[string]string{KeyHealthyDeadline: "20m", KeyMinHealthyTime: "10m"}, func(o options) bool {
			return o.spec.MinHealthyTime == 10*time.Minute && o.spec.MinHealthyTimeGiven
		}},
		{"min healthy time zero", map[string]string{KeyMinHealthyTime: "0"}, func(o options) bool {
			return o.spec.MinHealthyTime == 0 && o.spec.MinHealthyTimeGiven
		}},
		{"max unavailable", map[string]string{KeyMaxUnavailable: "25%"}, func(o options) bool {
			return o.spec.MaxUnavailable != nil && *o.spec.MaxUnavailable == mu
		}},
		{"surge", map[string]string{KeySurge: " 2 "}, func(o options) bool { return o.spec.Surge == 2 }},
		{"debounce", map[string]string{KeyDebounce: "1m"}, func(o options) bool { return o.debounce == time.Minute }},
		{"on-failure revert, any case", map[string]string{KeyOnFailure: " Revert "}, func(o options) bool { return o.onFailure == OnFailureRevert }},
		{"on-failure stop", map[string]string{KeyOnFailure: "stop"}, func(o options) bool { return o.onFailure == OnFailureStop }},
		{"on-failure defaults to stop", map[string]string{}, func(o options) bool { return o.onFailure == OnFailureStop }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := groupOptions(tt.meta)
			if len(o.problems) != 0 {
				t.Fatalf("problems = %v, want none", o.problems)
			}
			if !tt.check(o) {
				t.Errorf("spec = %+v, debounce %s: not as meant by %v", o.spec, o.debounce, tt.meta)
			}
		})
	}
}

// TestReadOptionsInvalid covers every option key: each invalid value is one problem naming
// the key, the level it was written at and the reason in the meta's words.
func TestReadOptionsInvalid(t *testing.T) {
	tests := []struct {
		key, value string
		reason     string // a fragment of the reason
	}{
		{KeyDebounce, "10", "positive duration"},
		{KeyDebounce, "0s", "positive duration"},
		{KeyDebounce, "-1s", "positive duration"},
		{KeyBatchSize, "0", "greater than zero"},
		{KeyBatchSize, "1.5", "give a number of allocations"},
		{KeyBatchSize, "", "give a number of allocations"},
		{KeyBatchWait, "10", `give a duration with a unit like 10s or 2m, or "ask"`},
		{KeyBatchWait, "-5s", "must not be negative"},
		{KeyOnError, "FAIL", `valid options are "ask" and "fail"`},
		{KeyOnError, "ignore", `valid options are "ask" and "fail"`},
		{KeyHealth, "healthy", `valid options are "auto"`},
		{KeyHealthyDeadline, "0s", "positive duration"},
		{KeyHealthyDeadline, "soon", "positive duration"},
		{KeyMinHealthyTime, "-1s", "it must not be negative"},
		// Shorter than the default deadline, named by its meta key.
		{KeyMinHealthyTime, "10m", "shorter than nomad-restart.healthy-deadline (5m0s)"},
		{KeyMaxUnavailable, "0", "greater than zero"},
		{KeyDrainUntil, "nginx=http://lb:80", "unknown balancer; give traefik=http://HOST:8080"},
		{KeyDrainUntil, "\n \n", "it is empty"},
		{KeyBalancerRefresh, "traefik=soon", "give a duration from 0 to 5m0s after traefik="},
		{KeyMaxUnavailable, "101%", "at most 100%"},
		{KeyBatchSize, "101%", "at most 100%"},
		{KeyBatchWait, "99999999999h", "too long"},
		{KeyMaxUnavailable, "one", "give a number of allocations"},
		{KeySurge, "0", "1 or more"},
		{KeySurge, "two", "1 or more"},
		{KeyOnFailure, "rollback", "give stop (the default: the rollout stops) or revert"},
		{KeyOnFailure, "", "give stop (the default: the rollout stops) or revert"},
		{KeyAfter, "api db-proxy", `"api db-proxy" is not a job name: separate job names with commas`},
		{KeyAfter, "api,", "a job name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			o := groupOptions(map[string]string{tt.key: tt.value})
			if len(o.problems) != 1 {
				t.Fatalf("problems = %v, want one", o.problems)
			}
			p := o.problems[0]
			if p.Key != tt.key || p.Value != tt.value || p.Level != "group" {
				t.Errorf("problem = %+v, want key %s, value %q, level group", p, tt.key, tt.value)
			}
			if !strings.Contains(p.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", p.Reason, tt.reason)
			}
			if strings.Contains(p.Reason, " -") {
				t.Errorf("reason %q names a flag; a job's author writes meta keys", p.Reason)
			}
		})
	}
}

func TestReadOptionsMinHealthyTimeAgainstGivenDeadline(t *testing.T) {
	o := groupOptions(map[string]string{KeyHealthyDeadline: "1m", KeyMinHealthyTime: "1m"})
	if len(o.problems) != 1 || o.problems[0].Key != KeyMinHealthyTime || !strings.Contains(o.problems[0].Reason, "(1m0s)") {
		t.Fatalf("problems = %v, want min-healthy-time refused against the 1m deadline", o.problems)
	}
}

func TestReadOptionsReportsInFixedOrder(t *testing.T) {
	o := groupOptions(map[string]string{
		KeySurge: "0", KeyBatchSize: "0", KeyDebounce: "x", "nomad-restart.zzz": "1", "nomad-restart.aaa": "1",
	})
	var keys []string
	for _, p := range o.problems {
		keys = append(keys, p.Key)
	}
	want := []string{KeyDebounce, KeyBatchSize, KeySurge, "nomad-restart.aaa", "nomad-restart.zzz"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("problem keys = %v, want %v", keys, want)
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		key    string
		reason string
	}{
		{"nomad-restart.batchsize", "did you mean nomad-restart.batch-size?"},
		{"nomad-restart.on_change", "did you mean nomad-restart.on-change?"},
		{"nomad-restart.surges", "did you mean nomad-restart.surge?"},
		{"nomad-restart.schedule", "the keys are nomad-restart.{on-change,debounce,batch-size,"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			o := readOptions("web", groupMeta(map[string]string{tt.key: "2"}, nil))
			if len(o.problems) != 1 {
				t.Fatalf("problems = %v, want one", o.problems)
			}
			p := o.problems[0]
			if p.Key != tt.key || p.Level != "job" || !strings.Contains(p.Reason, "unknown key: "+tt.reason) {
				t.Errorf("problem = %+v, want unknown key %s at job level: %s", p, tt.key, tt.reason)
			}
		})
	}
}

func TestGroupMetaGroupWinsKeyByKey(t *testing.T) {
	got := groupMeta(
		map[string]string{KeyOnChange: "auto", KeyBatchSize: "2", "owner": "team"},
		map[string]string{KeyBatchSize: "3"},
	)
	want := map[string]metaValue{
		KeyOnChange:  {value: "auto", level: "job"},
		KeyBatchSize: {value: "3", level: "group"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groupMeta = %v, want %v", got, want)
	}
}

func TestProblemString(t *testing.T) {
	p := Problem{Key: KeySurge, Value: "0", Level: "group", Reason: "give 1 or more"}
	if got, want := p.String(), `group meta nomad-restart.surge = "0": give 1 or more`; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// Gates in the meta: nomad-restart.gate.<name>, in the order of their names, with the
// default measuring policy; an invalid one is a problem (and none is applied).
func TestReadOptionsGates(t *testing.T) {
	o := groupOptions(map[string]string{
		"nomad-restart.gate.latency": `p99{job="{{job}}"} < 0.5`,
		"nomad-restart.gate.errors":  "sum(rate(errors_total[1m])) == 0",
	})
	if len(o.problems) != 0 {
		t.Fatalf("problems %v", o.problems)
	}
	g := o.spec.Gates
	want := []string{"errors: sum(rate(errors_total[1m])) == 0", `latency: p99{job="{{job}}"} < 0.5`}
	if g == nil || !slices.Equal(g.Specs, want) || g.Policy != gate.DefaultPolicy() {
		t.Fatalf("gates %+v, want %q with the default policy", g, want)
	}

	for _, tc := range []struct{ key, value, reason string }{
		{"nomad-restart.gate.errors", "rate(x[1m])", "no comparison"},
		{"nomad-restart.gate.errors", `x{job="{{jobb}}"} < 1`, "unknown template variable"},
		{"nomad-restart.gate.bad name", "x < 1", "name"},
	} {
		o := groupOptions(map[string]string{tc.key: tc.value})
		if len(o.problems) != 1 || o.problems[0].Key != tc.key || !strings.Contains(o.problems[0].Reason, tc.reason) || o.spec.Gates != nil {
			t.Errorf("%s = %q: problems %v, gates %+v; want one problem naming %q and no gates", tc.key, tc.value, o.problems, o.spec.Gates, tc.reason)
		}
	}
}

// A job's own gates replace a run's; without any, the run's stay.
func TestJobOptionsGates(t *testing.T) {
	run := restart.Spec{Gates: &restart.Gates{Specs: []string{"run: x < 1"}, Policy: gate.DefaultPolicy()}}
	s, problems := JobOptions(run, map[string]string{"nomad-restart.gate.own": "y > 0"})
	if len(problems) != 0 || s.Gates == nil || !slices.Equal(s.Gates.Specs, []string{"own: y > 0"}) {
		t.Fatalf("gates %+v, problems %v; want the job's own", s.Gates, problems)
	}
	s, _ = JobOptions(run, map[string]string{"nomad-restart.batch-size": "2"})
	if s.Gates != run.Gates {
		t.Fatalf("gates %+v, want the run's", s.Gates)
	}
}
