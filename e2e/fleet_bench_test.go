package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// BenchmarkFleet restarts a fleet of 500 service jobs of 4 allocations each on a simulated
// cluster, at most 20 jobs at once (`nomad-restart run -jobs ... -max-parallel-jobs 20`, in
// a child process), and compares it on the same cluster with:
//
//   - single-job restarts (`nomad-restart run <job>` with the same options, one process per
//     job) of jobs of the same shape outside the fleet: the fleet's requests per allocation
//     must stay within 10% of theirs;
//   - an ideal fleet driver (idealFleet: 20 workers sending only the restart requests, each
//     batch ended the instant the event stream shows its allocations running again, no
//     record, no check): the fleet's wall time must stay within 1.05 times its.
//
// It reports req/alloc (fleet and single), MiB-rss (the fleet driver's peak resident
// memory), s-fleet, s-ideal and x-ideal. Run it with -benchtime=1x; E2E_FLEET_JOBS
// overrides the number of jobs for a quicker look, E2E_FLEET_SCALE the simulation's speed.
func BenchmarkFleet(b *testing.B) {
	bin := buildCommand(b)
	for range b.N {
		benchFleet(b, bin, envInt(b, "E2E_FLEET_JOBS", 500), 4, 20, float64(envInt(b, "E2E_FLEET_SCALE", fleetBenchScale)))
	}
}

// fleetBenchArgs are the per-job options both the fleet and the single-job restarts use.
func fleetBenchArgs() []string {
	return []string{"-yes", "-on-error", "fail", "-state", "nomad", "-health", "running", "-batch-size", "2"}
}

// fleetBenchScale is the simulated seconds per real second of the fleet benchmark: real
// time, so that a restart takes on the simulated cluster what it takes on a real one, and
// the figures do not measure how 20 drivers share two cores with the simulation (at 20
// times real time the fleet took 2.3 times the ideal driver, which does no work per job).
const fleetBenchScale = 1

func benchFleet(b *testing.B, bin string, jobs, count, parallel int, scale float64) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := simtest.Start(b, nomadsim.Options{NodesPerDatacenter: 100, TimeScale: scale, Seed: 7, MaxConnsPerClient: 100})
	defer c.Close() // each iteration's cluster ends with it, not with the benchmark
	client := apiClient(b, c)
	ids := registerFleetJobs(ctx, b, c, "fl", jobs, count)
	singles := registerFleetJobs(ctx, b, c, "single", 5, count)
	env := driverEnv{addr: c.Addr(), stateHome: b.TempDir(), binary: bin}

	singleReq := benchSingles(ctx, b, c, env, singles)

	c.ResetStats()
	start := time.Now()
	b.StartTimer()
	ch, err := env.start(append([]string{"run", "-jobs", `Name matches "^fl-"`, "-max-parallel-jobs", fmt.Sprint(parallel)}, fleetBenchArgs()...)...)
	if err != nil {
		b.Fatal(err)
	}
	rctx, stopRSS := context.WithCancel(ctx)
	peak := peakRSS(rctx, ch.cmd.Process.Pid)
	code, err := ch.wait(ctx)
	b.StopTimer()
	elapsed := time.Since(start)
	stopRSS()
	stats := c.Stats()
	if err != nil || code != 0 {
		b.Fatalf("the fleet exited %d (%v):\n%s", code, err, tail(ch.out.String(), 4000))
	}
	fleets, err := nomadstore.NewFleets(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{}).List(ctx, "*", false)
	if err != nil || len(fleets) != 1 || fleets[0].Status != "succeeded" || fleets[0].Counts()[fleet.JobSucceeded] != jobs {
		b.Fatalf("the fleet did not succeed with %d jobs: %v %v", jobs, err, fleets)
	}
	ideal, err := idealFleet(ctx, c.Addr(), ids, parallel, 2)
	if err != nil {
		b.Fatalf("ideal fleet driver: %v", err)
	}
	allocs := float64(jobs * count)
	req := float64(stats.Requests) / allocs
	b.ReportMetric(req, "req/alloc")
	b.ReportMetric(singleReq, "req/alloc-single")
	b.ReportMetric(float64(peak())/1024, "MiB-rss")
	b.ReportMetric(elapsed.Seconds(), "s-fleet")
	b.ReportMetric(ideal.Seconds(), "s-ideal")
	b.ReportMetric(elapsed.Seconds()/ideal.Seconds(), "x-ideal")
	b.Logf("fleet of %d jobs x %d allocations, %d at once: %d requests (%.2f per allocation; a single-job restart %.2f, ratio %.3f), peak RSS %.1f MiB, %v (ideal fleet driver %v, ratio %.3f)",
		jobs, count, parallel, stats.Requests, req, singleReq, req/singleReq, float64(peak())/1024, elapsed.Round(time.Millisecond), ideal.Round(time.Millisecond), elapsed.Seconds()/ideal.Seconds())
	b.Log("by endpoint:" + strings.Join(topEndpoints(stats, jobs*count, 14), ";"))
	logChildPhases(ctx, b, client, fleets[0], start, start.Add(elapsed))
}

// logChildPhases logs where a child's time goes, medians over the fleet's children: from
// its record's creation to its first allocation's restart, the allocations' restarts, and
// from the last allocation's end to the record's end; and the fleet's gap between a
// child's end and the next child's creation.
func logChildPhases(ctx context.Context, b *testing.B, client *api.Client, rec *fleet.Record, began, exited time.Time) {
	st := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	var setup, work, tail, gaps []time.Duration
	var ends []time.Time
	var creates []time.Time
	var firstRestart, lastEnd time.Time
	for _, j := range rec.Jobs {
		child, err := st.Get(ctx, j.Namespace, j.RestartID)
		if err != nil {
			b.Fatal(err)
		}
		var first, last time.Time
		for _, a := range child.Allocs {
			if first.IsZero() || a.StartTime.Before(first) {
				first = a.StartTime
			}
			if a.EndTime.After(last) {
				last = a.EndTime
			}
		}
		if firstRestart.IsZero() || first.Before(firstRestart) {
			firstRestart = first
		}
		if child.EndTime.After(lastEnd) {
			lastEnd = child.EndTime
		}
		setup = append(setup, first.Sub(child.CreateTime))
		work = append(work, last.Sub(first))
		tail = append(tail, child.EndTime.Sub(last))
		ends = append(ends, child.EndTime)
		creates = append(creates, child.CreateTime)
	}
	for _, c := range creates {
		var prev time.Time
		for _, e := range ends {
			if !e.After(c) && e.After(prev) {
				prev = e
			}
		}
		if !prev.IsZero() {
			gaps = append(gaps, c.Sub(prev))
		}
	}
	b.Logf("a child's phases (median / mean): created to first restart %v / %v, restarts %v / %v, last done to its end %v / %v; a child's end to the next creation %v / %v; the process's start to the first restart request %v, the last child's end to the process's exit %v",
		quantile(setup, 0.5), mean(setup), quantile(work, 0.5), mean(work), quantile(tail, 0.5), mean(tail), quantile(gaps, 0.5), mean(gaps), firstRestart.Sub(began), exited.Sub(lastEnd))
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return (sum / time.Duration(len(ds))).Round(time.Microsecond)
}

// benchSingles restarts each job with its own `nomad-restart run` process and returns the
// requests per allocation they took together.
func benchSingles(ctx context.Context, b *testing.B, c *nomadsim.Cluster, env driverEnv, jobs []string) float64 {
	c.ResetStats()
	allocs := 0
	for _, job := range jobs {
		ch, err := env.start(append(append([]string{"run"}, fleetBenchArgs()...), job)...)
		if err != nil {
			b.Fatal(err)
		}
		if code, err := ch.wait(ctx); err != nil || code != 0 {
			b.Fatalf("run %s exited %d (%v):\n%s", job, code, err, tail(ch.out.String(), 4000))
		}
		stubs, _, err := apiClient(b, c).Jobs().Allocations(job, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		allocs += len(stubs)
	}
	return float64(c.Stats().Requests) / float64(allocs)
}

// idealFleet restarts the jobs' allocations the way no fleet driver can beat on this
// cluster: before it starts the clock it lists every job's allocations and subscribes to
// every allocation event; then parallel workers take the jobs in turn and, for each batch
// of size allocations, only send the restart requests at once and end the batch the instant
// the events show each allocation running again with a higher restart count. It returns
// the wall time from the first request to the last job's end.
func idealFleet(ctx context.Context, addr string, jobs []string, parallel, size int) (time.Duration, error) {
	client, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		return 0, err
	}
	tracker, err := followRestarts(ctx, client, jobs)
	if err != nil {
		return 0, err
	}
	queue := make(chan string, len(jobs))
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	start := time.Now()
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for job := range queue {
				if err := tracker.restartJob(ctx, client, job, size); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return elapsed, nil
}

// restartTracker follows every allocation's restart count from the event stream.
type restartTracker struct {
	mu       sync.Mutex
	changed  *sync.Cond
	restarts map[string]uint64 // allocation -> its main task's restarts, once running again
	byJob    map[string][]string
}

func followRestarts(ctx context.Context, client *api.Client, jobs []string) (*restartTracker, error) {
	t := &restartTracker{restarts: map[string]uint64{}, byJob: map[string][]string{}}
	t.changed = sync.NewCond(&t.mu)
	for _, job := range jobs {
		stubs, _, err := client.Jobs().Allocations(job, false, nil)
		if err != nil {
			return nil, err
		}
		for _, s := range stubs {
			if s.ClientStatus == api.AllocClientStatusRunning {
				t.byJob[job] = append(t.byJob[job], s.ID)
				if ts := s.TaskStates["main"]; ts != nil {
					t.restarts[s.ID] = ts.Restarts
				}
			}
		}
	}
	events, err := client.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, 0, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	go func() {
		for evs := range events {
			for _, ev := range evs.Events {
				a, err := ev.Allocation()
				if err != nil || a == nil || a.ClientStatus != api.AllocClientStatusRunning {
					continue
				}
				ts := a.TaskStates["main"]
				if ts == nil || ts.State != "running" {
					continue
				}
				t.mu.Lock()
				if ts.Restarts > t.restarts[a.ID] {
					t.restarts[a.ID] = ts.Restarts
					t.changed.Broadcast()
				}
				t.mu.Unlock()
			}
		}
	}()
	return t, nil
}

// restartJob restarts the job's allocations in batches of size, each ended when the
// events show all its allocations running again.
func (t *restartTracker) restartJob(ctx context.Context, client *api.Client, job string, size int) error {
	ids := t.byJob[job]
	for b := 0; b < len(ids); b += size {
		batch := ids[b:min(b+size, len(ids))]
		t.mu.Lock()
		want := map[string]uint64{}
		for _, id := range batch {
			want[id] = t.restarts[id] + 1
		}
		t.mu.Unlock()
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, id := range batch {
			wg.Go(func() {
				errs[i] = client.Allocations().Restart(&api.Allocation{ID: id}, "", (&api.QueryOptions{}).WithContext(ctx))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("restarting %s of %s: %w", batch[i], job, err)
			}
		}
		t.mu.Lock()
		for !t.reached(want) {
			if ctx.Err() != nil {
				t.mu.Unlock()
				return ctx.Err()
			}
			t.changed.Wait()
		}
		t.mu.Unlock()
	}
	return nil
}

func (t *restartTracker) reached(want map[string]uint64) bool {
	for id, n := range want {
		if t.restarts[id] < n {
			return false
		}
	}
	return true
}

// envInt reads a positive integer from the environment, or def when unset.
func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
