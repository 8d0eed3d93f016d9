package engine

import (
	"context"
	"fmt"
	"sort"
	"testing"

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
