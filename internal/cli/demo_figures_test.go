package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestFiguresOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name    string
		samples []servingSample
		ended   time.Time
		want    servingFigures
	}{
		{"no samples", nil, t0, servingFigures{}},
		{"one sample", []servingSample{{t0, 4}}, t0, servingFigures{MinServing: 4}},
		{"never down", []servingSample{{at(0), 4}, {at(1000), 3}, {at(3000), 4}}, at(3000),
			servingFigures{MinServing: 3, Seconds: 3, RestartSeconds: 3}},
		// None serve from 1 s to 3 s (the sample at 1 s holds until the next): 2 s of 4.
		{"an outage outlasting the restart", []servingSample{{at(0), 4}, {at(1000), 0}, {at(2000), 0}, {at(3000), 2}, {at(4000), 4}}, at(500),
			servingFigures{MinServing: 0, NoneServingShare: 0.5, Seconds: 4, RestartSeconds: 0.5}},
		// Time-weighted, not counted: one long sample of none among many short ones.
		{"weighted by time", []servingSample{{at(0), 2}, {at(100), 2}, {at(200), 0}, {at(2200), 2}}, at(2200),
			servingFigures{MinServing: 0, NoneServingShare: 0.909, Seconds: 2.2, RestartSeconds: 2.2}},
		{"a last sample of none does not count", []servingSample{{at(0), 1}, {at(1000), 0}}, at(1000),
			servingFigures{MinServing: 0, Seconds: 1, RestartSeconds: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := figuresOf(tc.samples, tc.ended); got != tc.want {
				t.Fatalf("figuresOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHealthy(t *testing.T) {
	check := func(mode, status string) *api.AllocCheckStatus {
		return &api.AllocCheckStatus{Mode: mode, Status: status}
	}
	cases := []struct {
		name   string
		checks []*api.AllocCheckStatus
		want   bool
	}{
		{"no checks", nil, false},
		{"passing", []*api.AllocCheckStatus{check("healthiness", "success")}, true},
		{"failing", []*api.AllocCheckStatus{check("healthiness", "failure")}, false},
		{"not probed yet", []*api.AllocCheckStatus{check("healthiness", "pending")}, false},
		{"one of two failing", []*api.AllocCheckStatus{check("healthiness", "success"), check("healthiness", "failure")}, false},
		{"a failing readiness check does not count", []*api.AllocCheckStatus{check("healthiness", "success"), check("readiness", "failure")}, true},
		{"readiness checks only", []*api.AllocCheckStatus{check("readiness", "success")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			statuses := api.AllocCheckStatuses{}
			for i, c := range tc.checks {
				statuses[string(rune('a'+i))] = *c
			}
			if got := healthy(statuses); got != tc.want {
				t.Fatalf("healthy = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSharePercent(t *testing.T) {
	for share, want := range map[float64]string{0: "0%", 0.001: "<1%", 0.005: "<1%", 0.01: "1%", 0.5: "50%", 0.987: "99%", 1: "100%"} {
		if got := sharePercent(share); got != want {
			t.Errorf("sharePercent(%v) = %q, want %q", share, got, want)
		}
	}
}

// TestAsNomadDoes keeps what the operator chose (batches, tasks) and takes Nomad's gate:
// none, with no availability budget and no surge.
func TestAsNomadDoes(t *testing.T) {
	two := restart.BatchSize{N: 2}
	in := restart.Spec{BatchSizes: []restart.BatchSize{two}, Health: restart.HealthChecks, MaxUnavailable: &two, Surge: 1, Tasks: []string{"server"}}
	got := asNomadDoes(in)
	if got.Health != restart.HealthNone || got.MaxUnavailable == nil || *got.MaxUnavailable != (restart.BatchSize{N: 100, Percent: true}) || got.Surge != 0 {
		t.Fatalf("asNomadDoes = %+v", got)
	}
	if len(got.BatchSizes) != 1 || got.BatchSizes[0] != two || got.Tasks[0] != "server" || in.Health != restart.HealthChecks || *in.MaxUnavailable != two {
		t.Fatalf("asNomadDoes changed the operator's options or its input: %+v, input %+v", got, in)
	}
}

// TestDemoBadInput: one line naming the problem and the fix, exit 1, before any cluster
// starts.
func TestDemoBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"web"}, "takes no arguments"},
		{[]string{"-detach"}, "cannot be detached"},
		{[]string{"-dry-run"}, "drop -dry-run"},
		{[]string{"-on-error=ask"}, "the demo asks nothing"},
		{[]string{"-batch-wait=ask"}, "the demo asks nothing"},
		{[]string{"-time-scale=0"}, "Invalid -time-scale value 0"},
		{[]string{"-http-addr=9646"}, `Invalid -http-addr value "9646": want host:port`},
		{[]string{"-batch-size=0"}, "Invalid -batch-size"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runDemo(context.Background(), tc.args...)
			if code != 1 || !strings.Contains(errOut.String(), tc.want) || strings.Count(errOut.String(), "\n") != 1 || out.String() != "" {
				t.Fatalf("demo %q: exit %d\nstderr: %s\nstdout: %s", tc.args, code, errOut.String(), out.String())
			}
		})
	}
}
