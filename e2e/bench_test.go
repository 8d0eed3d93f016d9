package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// benchScale is the simulated seconds per real second of the benchmarks: a task's
// 100 ms start takes 5 ms of real time.
const benchScale = 20

// benchBatch is the batch size: fixed, so that a bigger job means more batches of the
// same size, and any per-batch cost that grows with the job shows per allocation.
const benchBatch = 100

// BenchmarkRestart restarts every allocation of a 1,000- and a 10,000-allocation service
// job on 500 simulated nodes with `nomad-restart run -state nomad`, in place and with
// -reschedule, in a child process, and reports:
//
//	req/alloc    requests the driver sent to Nomad per restarted allocation (the store's
//	             variables included)
//	bytes/alloc  response bytes Nomad sent back per restarted allocation
//	ms/batch     the driver's added latency per batch, median (see batchLatency)
//	MiB-rss      the driver process's peak resident memory (its VmHWM: see peakRSS)
//
// Run it with -benchtime=1x: one iteration is a whole restart.
func BenchmarkRestart(b *testing.B) {
	bin := buildCommand(b)
	for _, n := range []int{1000, 10000} {
		for _, resched := range []bool{false, true} {
			mode := "in-place"
			if resched {
				mode = "reschedule"
			}
			b.Run(fmt.Sprintf("allocs=%d/%s", n, mode), func(b *testing.B) {
				for range b.N {
					benchRestart(b, bin, n, resched)
				}
			})
		}
	}
}

// buildCommand builds cmd/nomad-restart for the benchmark's driver, so that its memory is
// the product's and not this test binary's (which links the simulation too). With a
// profile asked for (profileEnv, heapProfileEnv) it returns "": only the test binary
// writes profiles.
func buildCommand(b *testing.B) string {
	if os.Getenv(profileEnv) != "" || os.Getenv(heapProfileEnv) != "" {
		return ""
	}
	bin := filepath.Join(b.TempDir(), "nomad-restart")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nomad-restart/nomad-restart/cmd/nomad-restart").CombinedOutput()
	if err != nil {
		b.Fatalf("building nomad-restart: %v\n%s", err, out)
	}
	return bin
}

func benchRestart(b *testing.B, bin string, n int, resched bool) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c, client := benchStart(ctx, b, n, benchScale)
	defer c.Close() // each iteration's cluster ends with it, not with the benchmark
	args := []string{"run", "-yes", "-json", "-on-error", "fail", "-state", "nomad", "-batch-size", fmt.Sprint(benchBatch)}
	if resched {
		args = append(args, "-reschedule")
	}
	run := benchDrive(ctx, b, c, client, driverEnv{addr: c.Addr(), stateHome: b.TempDir(), binary: bin}, append(args, "bench"), n, resched)
	stats, rec, lat := run.stats, run.rec, run.lat
	// The least any graceful driver pays per batch, measured on the same cluster and job
	// right after: what nomad-restart adds beyond it is its own overhead.
	minimal, err := minimalBatches(ctx, c.Addr(), "bench", resched, 10)
	if err != nil {
		b.Fatalf("minimal driver: %v", err)
	}
	ideal, idealTL := benchIdeal(ctx, b, c, client, c.Addr(), resched, benchBatch, 10)
	b.ReportMetric(float64(stats.Requests)/float64(n), "req/alloc")
	b.ReportMetric(float64(stats.ResponseBytes)/float64(n), "bytes/alloc")
	b.ReportMetric(lat.median.Seconds()*1000, "ms/batch")
	b.ReportMetric(lat.knownMedian.Seconds()*1000, "ms/batch-known")
	b.ReportMetric((lat.spanMedian-quantile(minimal, 0.5)).Seconds()*1000, "ms/batch-over-minimal")
	b.ReportMetric((lat.spanMedian-quantile(ideal, 0.5)).Seconds()*1000, "ms/batch-over-ideal")
	b.ReportMetric(float64(run.peakKiB)/1024, "MiB-rss")
	b.Logf("%d allocs, %d batches: %d requests, %d response bytes; batch latency added median %v (p90 %v, sim's own restart median %v, first signal to last start %v; batch start to intents written %v, to last alloc done %v, from there to the next batch %v); batch span median %v, a minimal driver's %v, an ideal driver's %v",
		n, rec.Batches, stats.Requests, stats.ResponseBytes, lat.median, lat.p90, lat.simMedian, lat.simSpan, lat.takeUp, lat.inBatch, lat.between, lat.spanMedian, quantile(minimal, 0.5), quantile(ideal, 0.5))
	benchLogTimelines(b, lat, idealTL, quantile(ideal, 0.5))
	// One line: the test framework keeps only the first lines of a benchmark's log.
	b.Log("by endpoint:" + strings.Join(topEndpoints(stats, n, 12), ";"))
	if os.Getenv("E2E_BENCH_HEAP") != "" {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.Logf("benchmark process (the simulation) heap in use: %.0f MiB", float64(ms.HeapInuse)/(1<<20))
	}
}

// benchStart starts the benchmarks' cluster, 500 nodes in two datacenters with scale
// simulated seconds per real second, with the service job "bench" of n allocations
// registered and running.
func benchStart(ctx context.Context, b *testing.B, n int, scale float64) (*nomadsim.Cluster, *api.Client) {
	c := simtest.Start(b, nomadsim.Options{NodesPerDatacenter: 250, TimeScale: scale, Seed: 7, MaxConnsPerClient: 100})
	client := apiClient(b, c)
	job := newJob("bench", "service", n)
	job.TaskGroups[0].Tasks[0].Resources = &api.Resources{CPU: new(20), MemoryMB: new(16)}
	if err := register(ctx, c, job); err != nil {
		b.Fatal(err)
	}
	return c, client
}

// benchRun is one restart of the bench job by nomad-restart, as benchDrive measured it.
type benchRun struct {
	stats   nomadsim.Stats // the cluster's request accounting over the driver's run
	events  []restart.Event
	rec     *restart.Record
	lat     latency
	peakKiB int64 // the driver process's peak resident memory
}

// benchDrive runs nomad-restart with args in env (the benchmark's timed part), checks that
// it restarted all n allocations of the job, and measures its added latency per batch.
func benchDrive(ctx context.Context, b *testing.B, c *nomadsim.Cluster, client *api.Client, env driverEnv, args []string, n int, resched bool) benchRun {
	c.ResetStats()
	b.StartTimer()
	ch, err := env.start(args...)
	if err != nil {
		b.Fatal(err)
	}
	rctx, stopRSS := context.WithCancel(ctx)
	peak := peakRSS(rctx, ch.cmd.Process.Pid)
	code, err := ch.wait(ctx)
	stopRSS()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	run := benchRun{stats: c.Stats(), peakKiB: peak()}
	out := ch.out.String()
	if code != 0 {
		b.Fatalf("nomad-restart exited %d:\n%s", code, tail(out, 4000))
	}
	if run.events, run.rec, err = parseJSONRun(out); err != nil {
		b.Fatal(err)
	}
	if run.rec.Status != restart.StatusSucceeded || len(run.rec.Allocs) != n {
		b.Fatalf("restart %s with %d allocations, want succeeded with %d", run.rec.Status, len(run.rec.Allocs), n)
	}
	if run.lat, err = batchLatency(c, client, run.events, run.rec, resched); err != nil {
		b.Fatal(err)
	}
	return run
}

// benchIdeal runs the ideal driver (idealBatches: requests only, done seen from the event
// stream, the least that any driver pays) through addr on the same cluster and job, right
// after nomad-restart, and returns its batch spans and its timeline.
func benchIdeal(ctx context.Context, b *testing.B, c *nomadsim.Cluster, client *api.Client, addr string, resched bool, size, batches int) ([]time.Duration, [4]time.Duration) {
	idealRun, err := idealBatches(ctx, addr, "bench", resched, size, batches)
	if err != nil {
		b.Fatalf("ideal driver: %v", err)
	}
	idealTL, err := idealTimeline(c, client, idealRun, resched)
	if err != nil {
		b.Fatalf("ideal driver's timeline: %v", err)
	}
	return idealSpans(idealRun), idealTL
}

// benchLogTimelines logs a batch's timeline, nomad-restart's and the ideal driver's.
func benchLogTimelines(b *testing.B, lat latency, idealTL [4]time.Duration, idealSpan time.Duration) {
	b.Logf("a batch's timeline from its start (medians): intents %v, first restart signal %v, last %v, last task start %v, known to the servers %v, last done %v, next batch %v; added beyond the servers' knowledge %v",
		lat.takeUp, lat.timeline[0], lat.timeline[1], lat.timeline[2], lat.timeline[3], lat.timeline[4], lat.spanMedian, lat.knownMedian)
	b.Logf("the ideal driver's (medians): first restart signal %v, last %v, last task start %v, known to the servers %v, next batch %v",
		idealTL[0], idealTL[1], idealTL[2], idealTL[3], idealSpan)
}

// parseJSONRun splits `run -json` output into its events and the final record.
func parseJSONRun(out string) ([]restart.Event, *restart.Record, error) {
	var events []restart.Event
	var rec *restart.Record
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var probe struct {
			Type   string
			Allocs json.RawMessage
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, nil, fmt.Errorf("bad JSON line %.200q: %w", line, err)
		}
		if probe.Allocs != nil {
			rec = &restart.Record{}
			if err := json.Unmarshal(line, rec); err != nil {
				return nil, nil, fmt.Errorf("bad final record: %w", err)
			}
			continue
		}
		var e restart.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, nil, fmt.Errorf("bad event %.200q: %w", line, err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if rec == nil {
		return nil, nil, fmt.Errorf("no final record in the output:\n%s", tail(out, 2000))
	}
	return events, rec, nil
}

// latency is the driver's added latency per batch.
type latency struct {
	median, p90, simMedian time.Duration
	// inBatch is the median time from a batch's start to its last allocation done;
	// between, from there to the next batch's start (the record's writes and the checks
	// before a batch).
	inBatch, between time.Duration
	// spanMedian is the median batch span, from its start to the next batch's.
	spanMedian time.Duration
	// takeUp is the median time from a batch's start to its intents (the allocations read
	// and their restart or stop about to be written).
	takeUp time.Duration
	// simSpan is the median time (Nomad's, converted to real time) from the batch's first
	// restart signal (or kill) to its last task start: the simulation's own time plus the
	// spread of the driver's requests.
	simSpan time.Duration
	// knownMedian is the median added latency beyond Nomad's time until its servers knew
	// the tasks ran again (the allocation's ModifyTime: the client's sync that carried the
	// task's start), rather than until the task started on its client.
	knownMedian time.Duration
	// timeline is, from the batch's start (medians over the batches): its first and last
	// restart signal, its last task start, the last start known to the servers, and the
	// driver's last "done".
	timeline [5]time.Duration
}

// batchLatency measures what the driver adds to each batch beyond the simulated restart.
//
// A batch's span is from its "batch-started" event to the next batch's (the last batch's:
// to the final event), on the driver's clock: it holds the requests, the waits, the
// record's writes and the deployment check before the next batch, everything the driver
// does. The simulation's own share is the longest, over the batch's allocations, of Nomad's
// time from the restart signal to the task's start again (in place; with -reschedule: from
// the old allocation's kill to its replacement's start), read from the task events
// (simulated clock) and converted to real time. The difference is what the tool adds: it
// cannot be less than the slowest allocation of the batch, and anything beyond it is
// request round trips, watch delays and store writes.
func batchLatency(c *nomadsim.Cluster, client *api.Client, events []restart.Event, rec *restart.Record, resched bool) (latency, error) {
	starts := map[int]time.Time{}
	lastDone := map[int]time.Time{}
	intents := map[int]time.Time{}
	batchOf := map[string]int{}
	for _, p := range rec.Allocs {
		batchOf[p.ID] = p.Batch
	}
	var end time.Time
	for _, e := range events {
		if e.Type == restart.EventAllocRestart {
			if b := batchOf[e.AllocID]; e.Time.After(intents[b]) {
				intents[b] = e.Time
			}
		}
		if e.Type == restart.EventAllocDone {
			if b := batchOf[e.AllocID]; e.Time.After(lastDone[b]) {
				lastDone[b] = e.Time
			}
		}
		if e.Type == restart.EventBatchStarted {
			if _, ok := starts[e.Batch]; !ok {
				starts[e.Batch] = e.Time
			}
		}
		if e.Time.After(end) {
			end = e.Time
		}
	}
	sim, simKnown := map[int]time.Duration{}, map[int]time.Duration{}
	firstSignal, lastSignal, lastStart, lastKnown := map[int]int64{}, map[int]int64{}, map[int]int64{}, map[int]int64{}
	for _, p := range rec.Allocs {
		t, err := simRestartTime(client, p, resched)
		if err != nil {
			return latency{}, err
		}
		sim[p.Batch] = max(sim[p.Batch], time.Duration(t.started-t.signal))
		simKnown[p.Batch] = max(simKnown[p.Batch], time.Duration(t.known-t.signal))
		if f, ok := firstSignal[p.Batch]; !ok || t.signal < f {
			firstSignal[p.Batch] = t.signal
		}
		lastSignal[p.Batch] = max(lastSignal[p.Batch], t.signal)
		lastStart[p.Batch] = max(lastStart[p.Batch], t.started)
		lastKnown[p.Batch] = max(lastKnown[p.Batch], t.known)
	}
	// Nomad's clock to the driver's: both are this machine's, the simulated one scaled.
	nowReal, nowSim, scale := time.Now(), c.Now().UnixNano(), c.TimeScale()
	realAt := func(simNanos int64) time.Time {
		return nowReal.Add(-time.Duration(float64(nowSim-simNanos) / scale))
	}
	var added, addedKnown, simDur, inBatch, between, takeUp, spans, simSpans []time.Duration
	var tl [5][]time.Duration // first signal, last signal, last start, last known, last done
	for b := 1; b <= rec.Batches; b++ {
		s, ok := starts[b]
		if !ok {
			return latency{}, fmt.Errorf("no batch-started event for batch %d", b)
		}
		next, ok := starts[b+1]
		if !ok {
			next = end
		}
		own := c.RealDuration(sim[b])
		added = append(added, next.Sub(s)-own)
		addedKnown = append(addedKnown, next.Sub(s)-c.RealDuration(simKnown[b]))
		spans = append(spans, next.Sub(s))
		simDur = append(simDur, own)
		simSpans = append(simSpans, c.RealDuration(time.Duration(lastStart[b]-firstSignal[b])))
		if t, ok := intents[b]; ok {
			takeUp = append(takeUp, t.Sub(s))
		}
		if d, ok := lastDone[b]; ok {
			inBatch = append(inBatch, d.Sub(s))
			between = append(between, next.Sub(d))
			tl[4] = append(tl[4], d.Sub(s))
		}
		for k, at := range []int64{firstSignal[b], lastSignal[b], lastStart[b], lastKnown[b]} {
			tl[k] = append(tl[k], realAt(at).Sub(s))
		}
	}
	var timeline [5]time.Duration
	for k := range tl {
		timeline[k] = quantile(tl[k], 0.5)
	}
	return latency{median: quantile(added, 0.5), p90: quantile(added, 0.9), simMedian: quantile(simDur, 0.5),
		inBatch: quantile(inBatch, 0.5), between: quantile(between, 0.5), takeUp: quantile(takeUp, 0.5), spanMedian: quantile(spans, 0.5),
		simSpan: quantile(simSpans, 0.5), knownMedian: quantile(addedKnown, 0.5), timeline: timeline}, nil
}

// restartTimes are one allocation's restart on Nomad's clock (nanoseconds): the restart
// signal (with -reschedule: the kill), the task's start after it (the replacement's), and
// when the servers had that start (the allocation's ModifyTime, set by the client's sync
// that carried it; nothing else changes the allocation afterwards in these benchmarks).
type restartTimes struct{ signal, started, known int64 }

// simRestartTime reads one allocation's restart times from its task events.
func simRestartTime(client *api.Client, p restart.AllocProgress, resched bool) (restartTimes, error) {
	var t restartTimes
	a, _, err := client.Allocations().Info(p.ID, nil)
	if err != nil {
		return t, fmt.Errorf("allocation %s: %w", p.ID, err)
	}
	ts := a.TaskStates["main"]
	if ts == nil {
		return t, fmt.Errorf("allocation %s has no state of task main", p.ID)
	}
	for _, e := range ts.Events {
		if (!resched && e.Type == api.TaskRestartSignal) || (resched && e.Type == api.TaskKilling) {
			t.signal = e.Time
		}
	}
	if t.signal == 0 {
		return t, fmt.Errorf("allocation %s: no restart or kill event", p.ID)
	}
	if resched {
		if p.Replacement == "" {
			return t, fmt.Errorf("allocation %s: no replacement recorded", p.ID)
		}
		if a, _, err = client.Allocations().Info(p.Replacement, nil); err != nil {
			return t, fmt.Errorf("replacement %s: %w", p.Replacement, err)
		}
		if ts = a.TaskStates["main"]; ts == nil {
			return t, fmt.Errorf("replacement %s has no state of task main", p.Replacement)
		}
	}
	for _, e := range ts.Events {
		if e.Type == api.TaskStarted && e.Time > t.signal {
			t.started, t.known = e.Time, max(e.Time, a.ModifyTime)
			return t, nil
		}
	}
	return t, fmt.Errorf("allocation %s: task main did not start after the restart", p.ID)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1)+0.5)]
}

// topEndpoints names the endpoints that took the most requests and bytes, per allocation.
func topEndpoints(s nomadsim.Stats, n, max int) []string {
	keys := s.Keys()
	sort.Slice(keys, func(i, j int) bool {
		a, b := s.Endpoints[keys[i]], s.Endpoints[keys[j]]
		if a.Requests != b.Requests {
			return a.Requests > b.Requests
		}
		return keys[i] < keys[j]
	})
	var out []string
	for i, k := range keys {
		if i == max {
			break
		}
		e := s.Endpoints[k]
		out = append(out, fmt.Sprintf(" %s %d req (%.2f/alloc) %d bytes (%.0f/alloc)", k, e.Requests, float64(e.Requests)/float64(n), e.ResponseBytes, float64(e.ResponseBytes)/float64(n)))
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
