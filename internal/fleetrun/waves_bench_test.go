package fleetrun

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BenchmarkFleetWaveHandoff measures how soon a downstream job starts once its upstream is
// healthy: a chain of 4 jobs (2 allocations each, Nomad checks) in 4 waves, every job
// healthy, driven to its end. A handoff is the time from the upstream's last allocation
// judged healthy (its restart's last alloc-done event) to the downstream's first restart
// request (its restart's first alloc-restart event, written just before the request). The
// promise: at most 1 s plus -wave-wait. Reported: the largest and the mean handoff, less
// -wave-wait.
//
//	go test -run '^$' -bench BenchmarkFleetWaveHandoff -benchtime 5x ./internal/fleetrun
func BenchmarkFleetWaveHandoff(b *testing.B) {
	for _, wait := range []time.Duration{0, time.Second} {
		b.Run(fmt.Sprintf("wave-wait=%s", wait), func(b *testing.B) {
			e := startEnv(b)
			names := []string{"chain-0", "chain-1", "chain-2", "chain-3"}
			e.registerChecked(b, names...)
			opts := options(1, 0, restart.OnErrorFail)
			for i := 1; i < len(names); i++ {
				d, err := fleet.ParseAfter(names[i] + ": " + names[i-1])
				if err != nil {
					b.Fatal(err)
				}
				opts.After = append(opts.After, d)
			}
			opts.WaveWait = wait
			spec := restart.Spec{Health: restart.HealthChecks, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}},
				HealthyDeadline: 20 * time.Second, MinHealthyTime: time.Second}
			var handoffs []time.Duration
			b.ResetTimer()
			for range b.N {
				rec := e.file(b, `Name matches "^chain-"`, spec, opts)
				var mu sync.Mutex
				lastHealthy, firstRequest := map[string]time.Time{}, map[string]time.Time{}
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				done, err := e.driver("bench:1", true).Run(ctx, rec.Namespace, rec.ID, func(ev Event) {
					mu.Lock()
					defer mu.Unlock()
					switch ev.Type {
					case restart.EventAllocDone:
						lastHealthy[ev.JobID] = ev.Time
					case restart.EventAllocRestart:
						if _, ok := firstRequest[ev.JobID]; !ok {
							firstRequest[ev.JobID] = ev.Time
						}
					}
				})
				cancel()
				if err != nil || done.Status != restart.StatusSucceeded {
					b.Fatalf("fleet %v: %v", done, err)
				}
				for i := 1; i < len(names); i++ {
					handoffs = append(handoffs, firstRequest[names[i]].Sub(lastHealthy[names[i-1]]))
				}
			}
			b.StopTimer()
			var sum time.Duration
			for _, h := range handoffs {
				sum += h
			}
			worst := slices.Max(handoffs)
			b.ReportMetric(float64((worst - wait).Milliseconds()), "max-handoff-beyond-wait-ms")
			b.ReportMetric(float64((sum/time.Duration(len(handoffs)) - wait).Milliseconds()), "mean-handoff-beyond-wait-ms")
			if worst > time.Second+wait {
				b.Errorf("a downstream job started %s after its upstream was healthy, more than 1s + -wave-wait %s", worst, wait)
			}
		})
	}
}
