package agent

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BenchmarkAgentConcurrentRestarts has one agent adopt and drive N restarts at once (two
// allocations each, in batches of one) on a simulated cluster, and reports the wall time
// for all, the requests the agent sent to Nomad per second and per restarted allocation,
// the requests by endpoint (logged), and the heap the agent's process held at its peak.
//
//	go test -run '^$' -bench BenchmarkAgentConcurrentRestarts -benchtime 1x ./internal/agent/
func BenchmarkAgentConcurrentRestarts(b *testing.B) {
	for _, n := range []int{50, 500} {
		b.Run(fmt.Sprintf("restarts=%d", n), func(b *testing.B) {
			for range b.N {
				benchOnce(b, n)
			}
		})
	}
}

func benchOnce(b *testing.B, n int) {
	e, _ := startBenchEnv(b, 0)
	ids := e.RegisterJobs(b, "default", "bench", n, 2, nil)
	recs := make([]*restart.Record, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			recs[i] = e.Detached(b, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
		})
	}
	wg.Wait()
	a := e.newAgent(b, "bench-agent", e.Sim.BootstrapToken(), func(c *Config) {
		c.Concurrency = n
		c.MinListGap = time.Second
		productWiring(b, e, c, nil)
	})
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	e.Sim.ResetStats()
	e.Sim.ResetConnStats()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var peakHeap uint64
	var peakMu sync.Mutex
	go func() {
		for ctx.Err() == nil {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peakMu.Lock()
			peakHeap = max(peakHeap, ms.HeapInuse)
			peakMu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	b.StartTimer()
	t0 := time.Now()
	stop := agenttest.Run(b, a)
	for _, rec := range recs {
		if final := e.WaitEnd(b, rec); final.Status != restart.StatusSucceeded {
			b.Fatalf("restart of %s ended %s (%s)", rec.JobID, final.Status, final.Reason)
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	stop()
	cancel()
	reqs := testutil.ToFloat64(a.metrics.apiRequests)
	st := e.Sim.Stats()
	b.ReportMetric(elapsed.Seconds(), "s/all")
	b.ReportMetric(reqs/elapsed.Seconds(), "agent-req/s")
	b.ReportMetric(reqs/float64(2*n), "agent-req/alloc")
	peakMu.Lock()
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	peakMu.Unlock()
	keys := st.Keys()
	sort.Slice(keys, func(i, j int) bool { return st.Endpoints[keys[i]].Requests > st.Endpoints[keys[j]].Requests })
	for _, k := range keys[:min(len(keys), 12)] {
		b.Logf("%-60s %8d requests %10d bytes", k, st.Endpoints[k].Requests, st.Endpoints[k].ResponseBytes)
	}
	cs := e.Sim.ConnStats()
	b.ReportMetric(float64(cs.Refused), "conns-refused")
	b.Logf("connections to the simulated Nomad: peak %d from one address (limit 100), %d refused", cs.PeakPerClient, cs.Refused)
	b.Logf("%d restarts: %v, %.0f agent requests (%.1f/s), simulated Nomad served %d (test's own reads included), peak heap %.1f MiB (simulation included)",
		n, elapsed.Round(time.Millisecond), reqs, reqs/elapsed.Seconds(), st.Requests, float64(peakHeap)/(1<<20))
}
