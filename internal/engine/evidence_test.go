package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestEvidence measures a job's evidence as a fleet in waves does for an upstream: its
// allocations healthy, then its gates held across the wave's wait (measured more than
// once, spread over it), or the gate that failed named.
func TestEvidence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   func(n int) float64
		wait    time.Duration
		wantErr string
		minAsks int
	}{
		{name: "gates hold across the wait", value: func(int) float64 { return 0.01 }, wait: 300 * time.Millisecond, minAsks: 2},
		{name: "no wait: measured once", value: func(int) float64 { return 0.01 }, minAsks: 1},
		{name: "a gate fails during the wait", value: func(n int) float64 {
			if n >= 2 {
				return 0.5
			}
			return 0.01
		}, wait: 300 * time.Millisecond, wantErr: "a gate failed during -wave-wait 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &scriptedQuerier{value: func(_ string, n int) (float64, error) { return tc.value(n), nil }}
			env := gatedEnv(t, q)
			spec := restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Gates: fastGates(`errors: rate{job="{{job}}"} < 0.02`)}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			var last EvidenceProgress
			err := env.e.Evidence(ctx, "default", "web", spec, tc.wait, func(p EvidenceProgress) {
				mu.Lock()
				defer mu.Unlock()
				last = p
			})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Evidence: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Evidence = %v, want an error containing %q", err, tc.wantErr)
			}
			if asks := q.asked(); len(asks) < tc.minAsks || (len(asks) > 0 && !strings.Contains(asks[0], `job="web"`)) {
				t.Errorf("queries asked: %q, want at least %d naming the job", asks, tc.minAsks)
			}
			if last.Healthy != 4 || last.Total != 4 {
				t.Errorf("last progress %+v, want 4 of 4 allocations healthy", last)
			}
		})
	}
}

// TestEvidenceOfAMissingJob: a job gone from Nomad gives no evidence, with Nomad's reason.
func TestEvidenceOfAMissingJob(t *testing.T) {
	env := gatedEnv(t, &scriptedQuerier{value: func(string, int) (float64, error) { return 0, errors.New("unused") }})
	err := env.e.Evidence(context.Background(), "default", "nosuch", restart.Spec{Health: restart.HealthRunning}, 0, func(EvidenceProgress) {})
	if err == nil {
		t.Fatal("the evidence of a job that does not exist was given")
	}
}
