package demo

import (
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestFiguresOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name    string
		samples []servingSample
		ended   time.Time
		want    Figures
	}{
		{"no samples", nil, t0, Figures{}},
		{"one sample", []servingSample{{t0, 4}}, t0, Figures{MinServing: 4}},
		{"never down", []servingSample{{at(0), 4}, {at(1000), 3}, {at(3000), 4}}, at(3000),
			Figures{MinServing: 3, Seconds: 3, RestartSeconds: 3}},
		// None serve from 1 s to 3 s (the sample at 1 s holds until the next): 2 s of 4.
		{"an outage outlasting the restart", []servingSample{{at(0), 4}, {at(1000), 0}, {at(2000), 0}, {at(3000), 2}, {at(4000), 4}}, at(500),
			Figures{MinServing: 0, NoneServingShare: 0.5, Seconds: 4, RestartSeconds: 0.5}},
		// Time-weighted, not counted: one long sample of none among many short ones.
		{"weighted by time", []servingSample{{at(0), 2}, {at(100), 2}, {at(200), 0}, {at(2200), 2}}, at(2200),
			Figures{MinServing: 0, NoneServingShare: 0.909, Seconds: 2.2, RestartSeconds: 2.2}},
		{"a last sample of none does not count", []servingSample{{at(0), 1}, {at(1000), 0}}, at(1000),
			Figures{MinServing: 0, Seconds: 1, RestartSeconds: 1}},
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
	started := time.Date(2026, 12, 2, 10, 0, 0, 400e6, time.UTC) // the tasks' latest start
	ran := started.Add(time.Second).Truncate(time.Second)        // a probe run in the next second
	check := func(mode, status string) cluster.CheckResult {
		return cluster.CheckResult{Mode: mode, Status: status, Time: ran}
	}
	stale := func(at time.Time) cluster.CheckResult {
		return cluster.CheckResult{Mode: "healthiness", Status: "success", Time: at}
	}
	cases := []struct {
		name   string
		checks []cluster.CheckResult
		want   bool
	}{
		{"passed before the restart", []cluster.CheckResult{stale(started.Add(-5 * time.Second).Truncate(time.Second))}, false},
		{"passed in the second of the start", []cluster.CheckResult{stale(started.Truncate(time.Second))}, false},
		{"no checks", nil, false},
		{"passing", []cluster.CheckResult{check("healthiness", "success")}, true},
		{"failing", []cluster.CheckResult{check("healthiness", "failure")}, false},
		{"not probed yet", []cluster.CheckResult{check("healthiness", "pending")}, false},
		{"one of two failing", []cluster.CheckResult{check("healthiness", "success"), check("healthiness", "failure")}, false},
		{"a failing readiness check does not count", []cluster.CheckResult{check("healthiness", "success"), check("readiness", "failure")}, true},
		{"readiness checks only", []cluster.CheckResult{check("readiness", "success")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := healthy(tc.checks, started); got != tc.want {
				t.Fatalf("healthy = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFailedOf(t *testing.T) {
	cases := map[string]Figures{
		"0 of 0 (0%)":                {},
		"412 of 1,020 (40%)":         {Requests: 1020, FailedRequests: 412},
		"1 of 2,900 (<1%)":           {Requests: 2900, FailedRequests: 1},
		"999 of 999 (100%)":          {Requests: 999, FailedRequests: 999},
		"0 of 1,234,567 (0%)":        {Requests: 1234567},
		"100,000 of 1,000,000 (10%)": {Requests: 1000000, FailedRequests: 100000},
	}
	for want, f := range cases {
		if got := failedOf(f); got != want {
			t.Errorf("failedOf(%+v) = %q, want %q", f, got, want)
		}
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
// none, with no availability budget, no surge and no drain.
func TestAsNomadDoes(t *testing.T) {
	two := restart.BatchSize{N: 2}
	in := restart.Spec{BatchSizes: []restart.BatchSize{two}, Health: restart.HealthChecks, MaxUnavailable: &two, Surge: 1, Tasks: []string{"server"},
		DrainUntil: []restart.DrainEvidence{{Kind: restart.EvidenceTraefik, Address: "http://t:8080"}}}
	got := asNomadDoes(in)
	if got.Health != restart.HealthNone || got.MaxUnavailable == nil || *got.MaxUnavailable != (restart.BatchSize{N: 100, Percent: true}) || got.Surge != 0 ||
		got.Drain != 0 || !got.DrainGiven || got.DrainUntil != nil {
		t.Fatalf("asNomadDoes = %+v", got)
	}
	if len(got.BatchSizes) != 1 || got.BatchSizes[0] != two || got.Tasks[0] != "server" || in.Health != restart.HealthChecks || *in.MaxUnavailable != two {
		t.Fatalf("asNomadDoes changed the operator's options or its input: %+v, input %+v", got, in)
	}
}
