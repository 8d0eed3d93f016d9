package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BenchmarkGracefulRestart restarts, with -health auto (checks; and running, for
// comparison), a service whose Consul
// check passes a known delay after each start, and reports on Nomad's (simulated) clock:
//   - time/ideal: the restart's total time over the ideal, the sum over batches of the
//     restart itself (Restart Signaled to the task's new start, from Nomad's task
//     events), the check's delay and the min-healthy time;
//   - min-serving: the fewest instances whose check passed in Consul, sampled every 100 ms
//     of Nomad's time throughout (count minus batch size is the floor the gate promises).
func BenchmarkGracefulRestart(b *testing.B) {
	const (
		benchScale = 1
		count      = 4
		delay      = 2 * time.Second
		minHealthy = time.Second
	)
	for _, tc := range []struct {
		health restart.HealthMode
		batch  int
	}{{restart.HealthAuto, 1}, {restart.HealthAuto, 2}, {restart.HealthRunning, 1}} {
		batch := tc.batch
		b.Run(fmt.Sprintf("health=%s/count=%d/batch=%d", tc.health, count, batch), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// Real time: the driver's own work (record writes, reads) takes real
				// time, which a faster scale would inflate on Nomad's clock.
				env := startGateSimScale(b, "", benchScale)
				env.registerJob(b, checkedJob("web", count, "", fmt.Sprintf("pass_after=%s", delay), minHealthy, time.Minute))
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				p, err := env.e.Plan(ctx, Request{Job: "web", Spec: restart.Spec{Health: tc.health, Yes: true,
					BatchSizes: []restart.BatchSize{{N: batch}}}})
				if err != nil {
					b.Fatal(err)
				}
				if err := env.e.Create(ctx, p.Record); err != nil {
					b.Fatal(err)
				}
				consul, err := consulapi.NewClient(&consulapi.Config{Address: env.sim.ConsulAddr()})
				if err != nil {
					b.Fatal(err)
				}
				// Sampler: passing instances in Consul, every 100ms of Nomad's time.
				sctx, stop := context.WithCancel(ctx)
				var wg sync.WaitGroup
				fewest := count
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(100 * time.Millisecond / benchScale)
					defer tick.Stop()
					for {
						entries, _, err := consul.Health().Service("web-api", "", true, (&consulapi.QueryOptions{}).WithContext(sctx))
						if err == nil {
							fewest = min(fewest, len(entries))
						}
						select {
						case <-sctx.Done():
							return
						case <-tick.C:
						}
					}
				}()
				start := env.sim.Now()
				b.StartTimer()
				final, err := env.e.Drive(ctx, p.Record.Namespace, p.Record.ID, nil)
				b.StopTimer()
				total := env.sim.Now().Sub(start)
				stop()
				wg.Wait()
				cancel()
				if err != nil || final.Status != restart.StatusSucceeded {
					b.Fatalf("status %v err %v", final.Status, err)
				}
				ideal := time.Duration(0)
				for bt := 1; bt <= final.Batches; bt++ {
					var longest time.Duration
					for _, k := range final.BatchAllocs(bt) {
						a, _, err := env.client.Allocations().Info(final.Allocs[k].ID, nil)
						if err != nil {
							b.Fatal(err)
						}
						ts := a.TaskStates["app"]
						var signaled time.Time
						for _, ev := range ts.Events {
							if ev.Type == restart.TaskEventRestartSignaled {
								signaled = time.Unix(0, ev.Time)
							}
						}
						longest = max(longest, ts.StartedAt.Sub(signaled))
					}
					ideal += longest + delay + minHealthy
				}
				if tc.health != restart.HealthRunning {
					// Without the gate the restart does not wait for the checks: the
					// ratio would only say how much sooner it ended.
					b.ReportMetric(float64(total)/float64(ideal), "time/ideal")
				}
				b.ReportMetric(float64(fewest), "min-serving")
				b.ReportMetric(float64(count-batch), "floor")
			}
		})
	}
}
