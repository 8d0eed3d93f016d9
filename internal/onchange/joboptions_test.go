package onchange

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// runSpec is a run's options as the CLI reads them with no flag given but -batch-size 3.
func runSpec() restart.Spec {
	return restart.Spec{
		BatchSizes:      []restart.BatchSize{{N: 3}},
		OnError:         restart.OnErrorAsk,
		Health:          restart.HealthAuto,
		HealthyDeadline: restart.DefaultHealthyDeadline,
	}
}

func TestJobOptions(t *testing.T) {
	quarter := restart.BatchSize{N: 25, Percent: true}
	withRunMinHealthy := func(s *restart.Spec) { s.MinHealthyTime, s.MinHealthyTimeGiven = 2*time.Minute, true }
	tests := []struct {
		name string
		run  func(*restart.Spec) // changes runSpec before the job's meta applies; nil: none
		meta map[string]string
		want func(*restart.Spec) // the changes the meta makes; nil: none
	}{
		{name: "no meta", meta: nil},
		{name: "keys without the prefix", meta: map[string]string{"team": "core", "batch-size": "9"}},
		{name: "batch size", meta: map[string]string{KeyBatchSize: "1,25%"},
			want: func(s *restart.Spec) { s.BatchSizes = []restart.BatchSize{{N: 1}, quarter} }},
		{name: "batch wait", meta: map[string]string{KeyBatchWait: "30s"},
			want: func(s *restart.Spec) { s.BatchWait = 30 * time.Second }},
		{name: "batch wait ask", meta: map[string]string{KeyBatchWait: "ask"},
			want: func(s *restart.Spec) { s.BatchWaitAsk = true }},
		{name: "health", meta: map[string]string{KeyHealth: "Running"},
			want: func(s *restart.Spec) { s.Health = restart.HealthRunning }},
		{name: "healthy deadline", meta: map[string]string{KeyHealthyDeadline: "10m"},
			want: func(s *restart.Spec) { s.HealthyDeadline, s.HealthyDeadlineGiven = 10*time.Minute, true }},
		{name: "min healthy time under the run's deadline", meta: map[string]string{KeyMinHealthyTime: "1m"},
			want: func(s *restart.Spec) { s.MinHealthyTime, s.MinHealthyTimeGiven = time.Minute, true }},
		{name: "min healthy time under the job's own deadline", meta: map[string]string{KeyHealthyDeadline: "20m", KeyMinHealthyTime: "10m"},
			want: func(s *restart.Spec) {
				s.HealthyDeadline, s.HealthyDeadlineGiven = 20*time.Minute, true
				s.MinHealthyTime, s.MinHealthyTimeGiven = 10*time.Minute, true
			}},
		{name: "the job's deadline over the run's min healthy time", run: withRunMinHealthy, meta: map[string]string{KeyHealthyDeadline: "3m"},
			want: func(s *restart.Spec) { s.HealthyDeadline, s.HealthyDeadlineGiven = 3*time.Minute, true }},
		{name: "max unavailable", meta: map[string]string{KeyMaxUnavailable: "25%"},
			want: func(s *restart.Spec) { s.MaxUnavailable = &quarter }},
		{name: "on error", meta: map[string]string{KeyOnError: "fail"},
			want: func(s *restart.Spec) { s.OnError = restart.OnErrorFail }},
		{name: "surge", meta: map[string]string{KeySurge: "1"},
			want: func(s *restart.Spec) { s.Surge = 1 }},
		{name: "drain until, one a line", meta: map[string]string{KeyDrainUntil: "traefik=http://t:8080\n\nhaproxy=unix:/run/haproxy.sock\n"},
			want: func(s *restart.Spec) {
				s.DrainUntil = []restart.DrainEvidence{{Kind: restart.EvidenceTraefik, Address: "http://t:8080"}, {Kind: restart.EvidenceHAProxy, Address: "unix:/run/haproxy.sock"}}
			}},
		{name: "balancer refresh", meta: map[string]string{KeyBalancerRefresh: "traefik=5s"},
			want: func(s *restart.Spec) { s.BalancerRefresh = map[string]time.Duration{"traefik": 5 * time.Second} }},
		// A rollout's keys are no run options: not applied, not checked.
		{name: "on-change and debounce", meta: map[string]string{KeyOnChange: "auto", KeyDebounce: "never"}},
		{name: "every option", meta: map[string]string{
			KeyBatchSize: "2", KeyBatchWait: "5s", KeyHealth: "checks", KeyHealthyDeadline: "4m", KeyMinHealthyTime: "30s",
			KeyMaxUnavailable: "1", KeyOnError: "fail", KeySurge: "2", KeyOnChange: "auto", "owner": "core"},
			want: func(s *restart.Spec) {
				s.BatchSizes, s.BatchWait, s.Health = []restart.BatchSize{{N: 2}}, 5*time.Second, restart.HealthChecks
				s.HealthyDeadline, s.HealthyDeadlineGiven = 4*time.Minute, true
				s.MinHealthyTime, s.MinHealthyTimeGiven = 30*time.Second, true
				s.MaxUnavailable, s.OnError, s.Surge = &restart.BatchSize{N: 1}, restart.OnErrorFail, 2
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := runSpec()
			if tt.run != nil {
				tt.run(&in)
			}
			want := in
			if tt.want != nil {
				tt.want(&want)
			}
			got, problems := JobOptions(in, tt.meta)
			if len(problems) != 0 {
				t.Fatalf("problems = %v, want none", problems)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("spec = %+v\nwant   %+v", got, want)
			}
		})
	}
}

func TestJobOptionsProblems(t *testing.T) {
	tests := []struct {
		name string
		run  func(*restart.Spec)
		meta map[string]string
		want []string // the problems, as they read
	}{
		{name: "invalid batch size", meta: map[string]string{KeyBatchSize: "zero", KeyOnError: "fail"},
			want: []string{`job meta nomad-restart.batch-size = "zero": give a number of allocations like 2, or a percentage like 25%`}},
		{name: "unknown key", meta: map[string]string{KeyBatchSize: "2", "nomad-restart.batchsize": "2"},
			want: []string{`job meta nomad-restart.batchsize = "2": unknown key: did you mean nomad-restart.batch-size?`}},
		{name: "min healthy time over the run's deadline", meta: map[string]string{KeyMinHealthyTime: "10m"},
			want: []string{`job meta nomad-restart.min-healthy-time = "10m": it must be shorter than nomad-restart.healthy-deadline (5m0s)`}},
		{name: "the job's deadline under the run's min healthy time",
			run:  func(s *restart.Spec) { s.MinHealthyTime, s.MinHealthyTimeGiven = 2*time.Minute, true },
			meta: map[string]string{KeyHealthyDeadline: "1m"},
			want: []string{`job meta nomad-restart.healthy-deadline = "1m": it must be longer than the run's -min-healthy-time (2m0s); set nomad-restart.min-healthy-time too`}},
		{name: "several, in run's order, unknown keys last",
			meta: map[string]string{"nomad-restart.zzz": "1", KeySurge: "0", KeyBatchWait: "soon", KeyHealth: "maybe"},
			want: []string{
				`job meta nomad-restart.batch-wait = "soon": give a duration with a unit like 10s or 2m, or "ask"`,
				`job meta nomad-restart.health = "maybe": valid options are "auto" (default: checks where the groups define them, else running), "checks", "running" and "none" (Nomad's behaviour)`,
				`job meta nomad-restart.surge = "0": give the number of extra allocations per group, 1 or more`,
				`job meta nomad-restart.zzz = "1": unknown key: the keys are nomad-restart.{on-change,debounce,batch-size,batch-wait,on-error,health,healthy-deadline,min-healthy-time,max-unavailable,drain,drain-until,balancer-refresh,surge,render-interval,after,on-failure}`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := runSpec()
			if tt.run != nil {
				tt.run(&in)
			}
			got, problems := JobOptions(in, tt.meta)
			if !reflect.DeepEqual(got, in) {
				t.Errorf("spec = %+v, want the run's unchanged %+v", got, in)
			}
			var texts []string
			for _, p := range problems {
				texts = append(texts, p.String())
				if p.Level != "job" {
					t.Errorf("problem %v: level %q, want job", p, p.Level)
				}
			}
			if !reflect.DeepEqual(texts, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestJobOptionsLeavesTheRunsSpec checks that applying a job's options never writes
// through to the run's spec, which every job of a fleet starts from.
func TestJobOptionsLeavesTheRunsSpec(t *testing.T) {
	in := runSpec()
	in.MaxUnavailable = &restart.BatchSize{N: 2}
	in.Groups = []string{"web"}
	before := runSpec()
	before.MaxUnavailable = &restart.BatchSize{N: 2}
	before.Groups = []string{"web"}
	got, problems := JobOptions(in, map[string]string{KeyBatchSize: "5", KeyMaxUnavailable: "3"})
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	if !reflect.DeepEqual(in, before) {
		t.Errorf("the run's spec changed: %+v, was %+v", in, before)
	}
	if got.BatchSizes[0].N != 5 || got.MaxUnavailable.N != 3 || !reflect.DeepEqual(got.Groups, []string{"web"}) {
		t.Errorf("job's spec = %+v", got)
	}
}
