package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkRestartBatchSizes restarts a service job with `nomad-restart run -state nomad
// -health running` at batch sizes 1, 5 and 100, in place and with -reschedule, on the
// cluster of BenchmarkRestart, and reports per case:
//
//	req/alloc              requests the driver sent per restarted allocation, everything
//	                       counted (the event stream is one request)
//	record-writes/alloc    writes of the restart's record (PUT of its head variable and of
//	record-writes/batch    its chunks; not the lease's nor the active marker's) per
//	                       allocation and per batch
//	record-reads/alloc     reads of the record (GET of its head and its chunks)
//	bytes/alloc            response bytes per restarted allocation
//	ms/batch-over-ideal    the median batch span over the ideal driver's (idealBatches) at
//	                       the same batch size on the same cluster and job right after
//
// The per-batch costs that batches of 100 spread thin show at batch size 1. Thirty
// allocations at sizes 1 and 5 (as the measurement on a real agent: 30 and 6
// batches) and 1,000 at size 100 (10 batches, BenchmarkRestart's smallest case) keep the
// whole benchmark near two and a half minutes on two cores.
//
// Each case runs twice, on two clocks. At scale=1 (Nomad's time is real time) a batch
// lasts about as long as on a real agent, so the driver's own real-time timers (the lazy
// writes' linger, the lease's renewals) meet the batches as they would there: its counts
// are the ones to compare with a real cluster (at scale=20 a batch of one ends within the
// linger, its outcome rides the next intent, and a write per batch goes unseen). At
// scale=20 (BenchmarkRestart's clock) the simulation's own time shrinks and the driver's
// added latency stands out of the noise: its ms/batch-over-ideal is the one to read.
//
// The driver and the ideal driver both reach the cluster through a counting proxy
// (varCounter), which tells the record's variables from the lease's: nomadsim counts by
// route. Both then pay its hop per request, about 0.1 ms on loopback.
//
// Run it with -benchtime=1x: one iteration is a whole restart.
func BenchmarkRestartBatchSizes(b *testing.B) {
	bin := buildCommand(b)
	for _, tc := range []struct{ size, allocs int }{{1, 30}, {5, 30}, {100, 1000}} {
		for _, resched := range []bool{false, true} {
			mode := "in-place"
			if resched {
				mode = "reschedule"
			}
			for _, scale := range []float64{1, benchScale} {
				b.Run(fmt.Sprintf("batch=%d/allocs=%d/%s/scale=%g", tc.size, tc.allocs, mode, scale), func(b *testing.B) {
					for range b.N {
						benchBatchSize(b, bin, tc.allocs, tc.size, resched, scale)
					}
				})
			}
		}
	}
}

func benchBatchSize(b *testing.B, bin string, n, size int, resched bool, scale float64) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, client := benchStart(ctx, b, n, scale)
	defer c.Close()
	proxy, err := startVarCounter(c.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer proxy.close()
	args := []string{"run", "-yes", "-json", "-on-error", "fail", "-state", "nomad", "-health", "running", "-batch-size", fmt.Sprint(size)}
	if resched {
		args = append(args, "-reschedule")
	}
	run := benchDrive(ctx, b, c, client, driverEnv{addr: proxy.addr(), stateHome: b.TempDir(), binary: bin}, append(args, "bench"), n, resched)
	vars := proxy.snapshot()
	ideal, idealTL := benchIdeal(ctx, b, c, client, proxy.addr(), resched, size, n/size)
	stats, rec, lat := run.stats, run.rec, run.lat
	writes := vars["PUT record"] + vars["PUT chunk"]
	reads := vars["GET record"] + vars["GET chunk"]
	b.ReportMetric(float64(stats.Requests)/float64(n), "req/alloc")
	b.ReportMetric(float64(writes)/float64(n), "record-writes/alloc")
	b.ReportMetric(float64(writes)/float64(rec.Batches), "record-writes/batch")
	b.ReportMetric(float64(reads)/float64(n), "record-reads/alloc")
	b.ReportMetric(float64(stats.ResponseBytes)/float64(n), "bytes/alloc")
	b.ReportMetric((lat.spanMedian-quantile(ideal, 0.5)).Seconds()*1000, "ms/batch-over-ideal")
	b.Logf("%d allocs, %d batches of %d: %d requests, %d response bytes; batch span median %v (p90 of the added latency %v), the ideal driver's %v",
		n, rec.Batches, size, stats.Requests, stats.ResponseBytes, lat.spanMedian, lat.p90, quantile(ideal, 0.5))
	benchLogTimelines(b, lat, idealTL, quantile(ideal, 0.5))
	// One line each: the test framework keeps only the first lines of a benchmark's log.
	b.Log("by endpoint:" + strings.Join(topEndpoints(stats, n, 14), ";"))
	b.Log("variables by kind:" + varCounts(vars, n))
}

// varCounter is a reverse proxy in front of the cluster that counts the requests on
// Nomad Variables by method and by what the variable is to the Nomad store (see
// nomadstore.Restarts): the record's head, its chunks, the lease, the job's active marker, or
// another (the list queries of /v1/vars are the cluster's own count).
type varCounter struct {
	srv *http.Server
	ln  net.Listener

	mu     sync.Mutex
	counts map[string]int64 // by "METHOD kind"
}

func startVarCounter(target string) (*varCounter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("proxy target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// Blocking queries and the event stream pass as they come; no pool limit below the
	// driver's own, and the responses' encoding as the cluster sent it.
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 100, DisableCompression: true}
	// A request its client gave up (the driver's streams when it exits) is no error here.
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	v := &varCounter{ln: ln, counts: map[string]int64{}}
	v.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kind := varKind(r.URL.Path); kind != "" {
			v.mu.Lock()
			v.counts[r.Method+" "+kind]++
			v.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: time.Minute}
	go func() {
		if err := v.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(fmt.Sprintf("counting proxy: %v", err))
		}
	}()
	return v, nil
}

func (v *varCounter) addr() string { return "http://" + v.ln.Addr().String() }

func (v *varCounter) close() { _ = v.srv.Close() }

func (v *varCounter) snapshot() map[string]int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int64, len(v.counts))
	for k, n := range v.counts {
		out[k] = n
	}
	return out
}

// varKind is what a request's path is to the Nomad store ("" for no single variable):
// <prefix>/<job>/<id> the record's head, <prefix>/<job>/<id>/c/<name> a chunk,
// <prefix>/<job>/<id>/lease the lease, <prefix>/<job>/active the active marker.
func varKind(path string) string {
	p, ok := strings.CutPrefix(path, "/v1/var/")
	if !ok {
		return ""
	}
	seg := strings.Split(p, "/")
	switch {
	case len(seg) == 3 && seg[2] == "active":
		return "active"
	case len(seg) == 3:
		return "record"
	case len(seg) == 4 && seg[3] == "lease":
		return "lease"
	case len(seg) == 5 && seg[3] == "c":
		return "chunk"
	}
	return "other"
}

// varCounts is the variable requests by kind, per allocation, on one line.
func varCounts(vars map[string]int64, n int) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf(" %s %d (%.2f/alloc)", k, vars[k], float64(vars[k])/float64(n)))
	}
	return strings.Join(out, ";")
}
