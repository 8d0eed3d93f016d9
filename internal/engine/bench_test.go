package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BenchmarkRequestsPerAlloc restarts a job against nomadsim and reports the requests and
// response bytes the engine sent to Nomad per restarted allocation (store traffic excluded:
// the local store is used).
func BenchmarkRequestsPerAlloc(b *testing.B) {
	for _, reschedule := range []bool{false, true} {
		for _, n := range []int{20, 100, 1000} {
			b.Run(fmt.Sprintf("allocs=%d/reschedule=%v", n, reschedule), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					env := startSim(b, false)
					env.register(b, "web", "service", map[string]int{"web": n})
					rec := env.plan(b, "web", restart.Spec{Reschedule: reschedule, BatchSizes: []restart.BatchSize{{N: 10, Percent: true}}, Yes: true})
					env.sim.ResetStats()
					b.StartTimer()
					final, err := env.e.Drive(context.Background(), rec.Namespace, rec.ID, nil)
					b.StopTimer()
					if err != nil || final.Status != restart.StatusSucceeded {
						b.Fatalf("status %v err %v", final.Status, err)
					}
					st := env.sim.Stats()
					b.ReportMetric(float64(st.Requests)/float64(n), "req/alloc")
					b.ReportMetric(float64(st.ResponseBytes)/float64(n), "B/alloc")
					if i == 0 && testing.Verbose() {
						keys := st.Keys()
						sort.Strings(keys)
						for _, k := range keys {
							b.Logf("%s: %d", k, st.Endpoints[k].Requests)
						}
					}
				}
			})
		}
	}
}

// BenchmarkGracefulRestart restarts, with -health auto (checks; and running, for
// comparison), a service whose Consul
// check passes a known delay after each start, and reports on Nomad's (simulated) clock:
//   - time/ideal: the restart's total time over the ideal, the sum over batches of the
//     time from the batch's restart (Restart Signaled, from Nomad's task events) until
//     Consul first showed each of its instances passing again (its check runs every
//     second, as Consul runs checks: the first run after the delay), the batch's longest,
//     and the min-healthy time: no gate can know an instance healthy before Consul says so;
//   - min-serving: the fewest instances whose check passed in Consul, sampled every 20 ms
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
				// Sampler: passing instances in Consul, every 20ms of Nomad's time, and when
				// each instance was first seen passing after not passing.
				sctx, stop := context.WithCancel(ctx)
				var wg sync.WaitGroup
				fewest := count
				passedAt := map[string][]time.Time{} // by allocation ID
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(20 * time.Millisecond / benchScale)
					defer tick.Stop()
					was := map[string]bool{}
					for {
						checks, _, err := consul.Health().Checks("web-api", (&consulapi.QueryOptions{}).WithContext(sctx))
						if err == nil {
							now, passing := env.sim.Now(), 0
							for _, c := range checks {
								id := strings.TrimPrefix(c.ServiceID, "_nomad-task-")[:36]
								ok := c.Status == consulapi.HealthPassing
								if ok {
									passing++
									if !was[id] {
										passedAt[id] = append(passedAt[id], now)
									}
								}
								was[id] = ok
							}
							fewest = min(fewest, passing)
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
				if tc.health != restart.HealthRunning {
					// Without the gate the restart does not wait for the checks: the
					// ratio would only say how much sooner it ended.
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
							passed := time.Time{}
							for _, at := range passedAt[a.ID] {
								if at.After(ts.StartedAt) {
									passed = at
									break
								}
							}
							if passed.IsZero() {
								b.Fatalf("allocation %s was never seen passing after its restart", a.ID)
							}
							longest = max(longest, passed.Sub(signaled))
						}
						ideal += longest + minHealthy
					}
					b.ReportMetric(float64(total)/float64(ideal), "time/ideal")
				}
				b.ReportMetric(float64(fewest), "min-serving")
				b.ReportMetric(float64(count-batch), "floor")
			}
		})
	}
}
