package nomadsim

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// startBench starts a cluster on ctx for a benchmark, with an api client without a token.
// The caller closes it: a benchmark that starts one per iteration must not keep them all.
func startBench(b *testing.B, ctx context.Context, opts Options) (*Cluster, *api.Client) {
	b.Helper()
	c, err := Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	cl, err := c.APIClient("")
	if err != nil {
		_ = c.Close()
		b.Fatal(err)
	}
	return c, cl
}

// BenchmarkScale10k registers 10,000 allocations on 500 nodes, waits for them all to run,
// then restarts every one in place through the HTTP API (8 at a time).
func BenchmarkScale10k(b *testing.B) {
	for i := 0; i < b.N; i++ {
		scale10k(b)
	}
}

func scale10k(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, cl := startBench(b, ctx, Options{Datacenters: []string{"dc1", "dc2", "dc3", "dc4", "dc5"}, NodesPerDatacenter: 100, TimeScale: 1000, Seed: 1})
	defer c.Close()
	const jobs, perJob = 10, 1000
	start := time.Now()
	for k := 0; k < jobs; k++ {
		job := serviceJob(fmt.Sprintf("svc-%02d", k), perJob)
		job.Datacenters = []string{"*"}
		if _, _, err := cl.Jobs().Register(job, nil); err != nil {
			b.Fatal(err)
		}
	}
	for k := 0; k < jobs; k++ {
		if err := c.WaitJobRunning(ctx, "default", fmt.Sprintf("svc-%02d", k)); err != nil {
			b.Fatal(err)
		}
	}
	placed := time.Since(start)
	// Live heap with the 10,000 allocations placed and running: the state's footprint.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MB")
	stubs, _, err := cl.Allocations().List(&api.QueryOptions{Params: map[string]string{"task_states": "false"}})
	if err != nil {
		b.Fatal(err)
	}
	if len(stubs) != jobs*perJob {
		b.Fatalf("%d allocations, want %d", len(stubs), jobs*perJob)
	}
	start = time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := cl.Allocations().Restart(&api.Allocation{ID: id}, "", nil); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range stubs {
		work <- s.ID
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	restarted := time.Since(start)
	b.ReportMetric(placed.Seconds(), "place-s")
	b.ReportMetric(restarted.Seconds(), "restart-s")
}

// BenchmarkRestartInPlace measures one in-place restart through the HTTP API, the call
// the restart engine makes most, on an allocation whose task exits at once.
func BenchmarkRestartInPlace(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, cl := startBench(b, ctx, Options{TimeScale: 10000, Seed: 1})
	defer c.Close()
	job := serviceJob("bench", 1)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitJobRunning(ctx, "default", "bench"); err != nil {
		b.Fatal(err)
	}
	stubs, _, err := cl.Jobs().Allocations("bench", false, nil)
	if err != nil {
		b.Fatal(err)
	}
	a := &api.Allocation{ID: stubs[0].ID}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// The task must be running again before the next restart.
		if err := c.WaitJobRunning(ctx, "default", "bench"); err != nil {
			b.Fatal(err)
		}
		if err := cl.Allocations().Restart(a, "", nil); err != nil {
			b.Fatal(err)
		}
	}
}
