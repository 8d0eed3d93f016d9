package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Benchmarks of the two ways to watch a batch of allocations restarted in place: one
// blocking query per allocation (WatchAllocation) or one per job (WatchJobAllocations).
// They report the requests and response bytes Nomad served per restarted allocation.
//
//	go test -run '^$' -bench Watch -benchtime 3x ./internal/cluster/

// restartedAndRunning reports whether the allocation's task restarted past before and runs.
func restartedAndRunning(a *restart.Alloc, before uint64) bool {
	ts, ok := a.Tasks["app"]
	return ok && ts.Restarts > before && ts.State == restart.TaskRunning
}

func BenchmarkWatchBatch(b *testing.B) {
	for _, tc := range []struct{ count, batch int }{{20, 10}, {200, 10}, {200, 50}} {
		for _, mode := range []string{"per-alloc", "per-job", "event-stream"} {
			b.Run(fmt.Sprintf("%s/allocs=%d/batch=%d", mode, tc.count, tc.batch), func(b *testing.B) {
				sim, n := startBenchSim(b, tc.count)
				ctx := context.Background()
				var requests, bytes, streamBytes int64
				for b.Loop() {
					allocs, idx, err := n.JobAllocations(ctx, "default", "web")
					if err != nil {
						b.Fatal(err)
					}
					batch := allocs[:tc.batch]
					before := make(map[string]uint64, len(batch))
					for _, a := range batch {
						before[a.ID] = a.Tasks["app"].Restarts
					}
					sim.ResetStats()
					sctx, cancel := context.WithCancel(ctx)
					var updates <-chan cluster.AllocUpdate
					if mode == "event-stream" {
						updates = n.StreamJobAllocations(sctx, "default", "web", idx)
					}
					var wg sync.WaitGroup
					for _, a := range batch {
						wg.Go(func() {
							if err := n.RestartTasks(ctx, a.ID, "", false); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
					switch mode {
					case "per-alloc":
						for _, a := range batch {
							wg.Go(func() {
								var at uint64
								for {
									got, next, err := n.WatchAllocation(ctx, a.ID, at)
									if err != nil {
										b.Error(err)
										return
									}
									if restartedAndRunning(got, before[a.ID]) {
										return
									}
									at = next
								}
							})
						}
						wg.Wait()
					case "per-job":
						for pending := len(batch); pending > 0; {
							var got []*restart.Alloc
							got, idx, err = n.WatchJobAllocations(ctx, "default", "web", idx)
							if err != nil {
								b.Fatal(err)
							}
							pending = 0
							for _, a := range got {
								if prev, ok := before[a.ID]; ok && !restartedAndRunning(a, prev) {
									pending++
								}
							}
						}
					case "event-stream":
						for pending := maps.Clone(before); len(pending) > 0; {
							u := <-updates
							if u.Err != nil {
								b.Fatal(u.Err)
							}
							if prev, ok := pending[u.Alloc.ID]; ok && restartedAndRunning(u.Alloc, prev) {
								delete(pending, u.Alloc.ID)
							}
							idx = max(idx, u.Index)
						}
					}
					cancel()
					if updates != nil {
						for range updates {
						}
						// nomadsim accounts a request when its handler returns: wait for
						// the stream's end to be recorded.
						for i := 0; i < 2000 && sim.Stats().Get("GET", "/v1/event/stream").Requests == 0; i++ {
							time.Sleep(time.Millisecond)
						}
					}
					st := sim.Stats()
					streamBytes += st.Get("GET", "/v1/event/stream").ResponseBytes
					for _, route := range []string{"/v1/allocation/:id", "/v1/job/:id/allocations", "/v1/event/stream"} {
						e := st.Get("GET", route)
						requests += e.Requests
						bytes += e.ResponseBytes
					}
				}
				perAlloc := float64(b.N * tc.batch)
				b.ReportMetric(float64(requests)/perAlloc, "watch-req/alloc")
				b.ReportMetric(float64(bytes)/perAlloc, "watch-B/alloc")
				if mode == "event-stream" {
					// The rest of watch-B/alloc is the job list read once per connection.
					b.ReportMetric(float64(streamBytes)/perAlloc, "stream-B/alloc")
				}
			})
		}
	}
}

// BenchmarkReadSizes reports the bytes of one full allocation read and of one allocation
// in the job's list.
func BenchmarkReadSizes(b *testing.B) {
	sim, n := startBenchSim(b, 50)
	ctx := context.Background()
	allocs, _, err := n.JobAllocations(ctx, "default", "web")
	if err != nil {
		b.Fatal(err)
	}
	sim.ResetStats()
	for b.Loop() {
		if _, _, err := n.JobAllocations(ctx, "default", "web"); err != nil {
			b.Fatal(err)
		}
		if _, err := n.Allocation(ctx, allocs[0].ID); err != nil {
			b.Fatal(err)
		}
	}
	st := sim.Stats()
	b.ReportMetric(float64(st.Get("GET", "/v1/job/:id/allocations").ResponseBytes)/float64(b.N*len(allocs)), "stub-B/alloc")
	b.ReportMetric(float64(st.Get("GET", "/v1/allocation/:id").ResponseBytes)/float64(b.N), "full-B/alloc")
}
