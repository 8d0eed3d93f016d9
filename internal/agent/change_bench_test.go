package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The scale of BenchmarkConfigChangeRollouts.
const (
	changeBenchJobs     = 200             // opted-in jobs, each reading its own variable
	changeBenchAllocs   = 2               // allocations per job
	changeBenchChanges  = 10              // variables changed, each of a different job
	changeBenchDebounce = time.Second     // the jobs' nomad-restart.debounce
	changeBenchIdle     = 5 * time.Second // the quiet window whose requests are counted
	// changeBenchGap spaces the changes, so that their rollouts overlap without being one
	// burst.
	changeBenchGap = 500 * time.Millisecond
)

// BenchmarkConfigChangeRollouts has one agent follow changeBenchJobs jobs that opt in to
// config-change rollouts, each with a template reading its own variable
// nomad/jobs/<job>/config, on a simulated cluster whose time is real time and which refuses
// a client address its 101st connection, as Nomad does. It reports:
//
//   - the most connections the agent held open to Nomad at once, and the most blocking
//     queries it had in flight (Nomad allows a client address 100 connections);
//   - the requests it sent during changeBenchIdle of real time once it had settled,
//     while nothing changed (only the blocking queries' re-issues at their wait's end
//     may count);
//   - from the return of a variable's write to the first restart request of that job's
//     rollout reaching Nomad (its allocation's Restart Signaled event, on the simulated
//     cluster's clock), the median over changeBenchChanges changes to different jobs, and
//     its excess over the debounce;
//   - how long the agent took to follow every job, the requests that cost, and the
//     goroutines it holds.
//
// Every rollout must succeed and no connection may be refused, or the benchmark fails.
//
//	go test -run '^$' -bench BenchmarkConfigChangeRollouts -benchtime=1x ./internal/agent/
func BenchmarkConfigChangeRollouts(b *testing.B) {
	for range b.N {
		changeBenchOnce(b)
	}
}

func changeBenchOnce(b *testing.B) {
	e, ctx := startBenchEnv(b, realTime)
	jobs, indexes := changeBenchCluster(b, ctx, e)

	var r changeBenchResult
	wire := &wireLog{}
	follows := &followCount{}
	goroutinesBefore := runtime.NumGoroutine()
	a := e.newAgent(b, "change-bench", e.Sim.BootstrapToken(), func(c *Config) {
		c.Now = e.Sim.Now
		c.MinListGap = time.Second // the product's default: it delays the discovery of a rollout
		c.Logger = slog.New(follows)
		changeBenchWiring(b, e, c, wire)
	})
	e.Sim.ResetStats()
	e.Sim.ResetConnStats()
	b.StartTimer()
	t0 := time.Now()
	stop := agenttest.Run(b, a)
	simtest.WaitFor(b, ctx, "the agent following every job", func() bool { return follows.n() == changeBenchJobs })
	r.followed = time.Since(t0)
	waitQuiet(b, ctx, wire)
	r.settled = time.Since(t0)
	r.startup = wire.since(t0)

	idleFrom := time.Now()
	time.Sleep(changeBenchIdle) // a measurement window, not a wait for a condition
	r.idle = wire.since(idleFrom)
	now := wire.counts()
	r.idleConns, r.idleBlocking = now.conns, now.blocking
	r.goroutines = runtime.NumGoroutine() - goroutinesBefore

	changed := jobs[:0:0]
	for i := range changeBenchChanges {
		changed = append(changed, jobs[i*changeBenchJobs/changeBenchChanges])
	}
	changesFrom := time.Now()
	r.written = writeChanges(b, e, changed, indexes)
	r.signaled = restartSignals(b, ctx, e, changed)
	b.StopTimer()
	r.filed = waitRollouts(b, ctx, e, changed)
	stop()
	r.rollouts = wire.since(changesFrom)
	end := wire.counts()
	r.peakConns, r.peakBlocking = end.peakConns, end.peakBlocking
	r.report(b, e.Sim, changed)
}

// changeBenchCluster creates the jobs' variables, then registers the jobs once the
// debounce has passed since (the agent takes allocations started within it for ones that
// may not have re-rendered, and would roll every job at its start); it returns the jobs and
// their variables' ModifyIndexes.
func changeBenchCluster(b *testing.B, ctx context.Context, e *env) ([]string, map[string]uint64) {
	jobs := make([]string, changeBenchJobs)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("cfg-%03d", i)
	}
	indexes, created := createBenchVars(b, e.Client, jobs)
	simtest.WaitFor(b, ctx, "the debounce to pass since the variables were created", func() bool {
		return e.Sim.Now().After(created.Add(changeBenchDebounce))
	})
	registerTemplatedMany(b, e, jobs)
	return jobs, indexes
}

// changeBenchResult is what one run of the benchmark measured.
type changeBenchResult struct {
	followed, settled        time.Duration // from the agent's start
	startup, idle, rollouts  []wireReq     // the agent's requests in each phase
	goroutines               int           // the agent's, once settled
	peakConns, peakBlocking  int
	idleConns, idleBlocking  int                  // open at the end of the idle window
	written, signaled, filed map[string]time.Time // by changed job, on the cluster's clock
}

func (r *changeBenchResult) report(b *testing.B, sim *nomadsim.Cluster, changed []string) {
	var lat, toFiled, toRestart []time.Duration
	for _, job := range changed {
		lat = append(lat, r.signaled[job].Sub(r.written[job]))
		toFiled = append(toFiled, r.filed[job].Sub(r.written[job]))
		toRestart = append(toRestart, r.signaled[job].Sub(r.filed[job]))
	}
	for _, ds := range [][]time.Duration{lat, toFiled, toRestart} {
		slices.Sort(ds)
	}
	med := medianOf(lat)
	b.ReportMetric(float64(r.peakConns), "peak-conns")
	b.ReportMetric(float64(r.peakBlocking), "peak-blocking")
	b.ReportMetric(float64(len(r.idle)), "idle-req/5s")
	b.ReportMetric(med.Seconds(), "change-to-restart-s")
	b.ReportMetric((med - changeBenchDebounce).Seconds(), "over-debounce-s")
	b.ReportMetric((lat[len(lat)-1] - changeBenchDebounce).Seconds(), "max-over-debounce-s")
	b.ReportMetric(r.settled.Seconds(), "settle-s")
	b.ReportMetric(float64(len(r.startup)), "startup-req")
	b.ReportMetric(float64(r.goroutines), "goroutines")

	b.Logf("startup: followed %d jobs in %v, settled in %v, %d requests: %s", changeBenchJobs,
		r.followed.Round(time.Millisecond), r.settled.Round(time.Millisecond), len(r.startup), byEndpoint(r.startup))
	b.Logf("idle for %v: %d requests (%s); %d connections open, %d blocking queries waiting",
		changeBenchIdle, len(r.idle), byEndpoint(r.idle), r.idleConns, r.idleBlocking)
	b.Logf("%d changes and their rollouts: %d requests: %s", len(changed), len(r.rollouts), byEndpoint(r.rollouts))
	jl := sim.Stats().Get(http.MethodGet, "/v1/jobs")
	b.Logf("job list answers since the agent started: %d, %d bytes in all", jl.Requests, jl.ResponseBytes)
	b.Logf("change to first restart request (Restart Signaled): %v", lat)
	b.Logf("  of which change to rollout filed: %v", toFiled)
	b.Logf("  and rollout filed to first restart request: %v", toRestart)
	cs := sim.ConnStats()
	b.Logf("connections: the agent's peak %d, blocking queries in flight peak %d; simulated Nomad's peak from one address %d (the test's own client shares it), %d refused",
		r.peakConns, r.peakBlocking, cs.PeakPerClient, cs.Refused)
	if cs.Refused > 0 {
		b.Errorf("Nomad refused %d connections over its limit of 100 per client", cs.Refused)
	}
}

// changeBenchWiring gives the agent the clients `nomad-restart agent` builds (as
// productWiring does), each transport watched by wire, and turns config-change rollouts
// on with a source hub on the cluster's client, which it returns.
func changeBenchWiring(b *testing.B, e *env, c *Config, wire *wireLog) *api.Client {
	client := productWiring(b, e, c, func(tr *http.Transport) http.RoundTripper {
		tr.DialContext = wire.dial(tr.DialContext)
		return wire.wrap(tr)
	})
	c.Changes = &ChangeRollouts{Sources: sourcewatch.New(nomadvars.New(client, nomadvars.Options{}), sourcewatch.Options{})}
	return client
}

func benchVarPath(job string) string { return "nomad/jobs/" + job + "/config" }

// createBenchVars creates each job's variable and returns their ModifyIndexes by job and
// the newest ModifyTime.
func createBenchVars(b *testing.B, client *api.Client, jobs []string) (map[string]uint64, time.Time) {
	out := make(map[string]uint64, len(jobs))
	var newest time.Time
	for _, job := range jobs {
		v := &api.Variable{Namespace: "default", Path: benchVarPath(job), Items: map[string]string{"greeting": "hello"}}
		got, _, err := client.Variables().CheckedCreate(v, nil)
		if err != nil {
			b.Fatalf("creating variable %s: %v", v.Path, err)
		}
		out[job] = got.ModifyIndex
		if at := time.Unix(0, got.ModifyTime); at.After(newest) {
			newest = at
		}
	}
	return out, newest
}

// registerTemplatedMany registers, concurrently, a service job per id whose task renders
// its variable (change_mode noop) and that opts in with a debounce of changeBenchDebounce,
// without deployments (max_parallel 0), and waits until every allocation runs.
func registerTemplatedMany(b *testing.B, e *env, ids []string) {
	simtest.Concurrently(b, len(ids), func(i int) error {
		if _, err := e.Sim.RegisterJob(templatedBenchJob(ids[i])); err != nil {
			return fmt.Errorf("registering job %s: %w", ids[i], err)
		}
		return nil
	})
	ctx := agenttest.Context(b)
	simtest.WaitFor(b, ctx, "every job's allocations running", func() bool {
		return runningPerJob(ctx, e.Client) == len(ids)*changeBenchAllocs
	})
}

func templatedBenchJob(id string) *api.Job {
	job := templatedJob(id, changeBenchAllocs, agenttest.GreetingTemplate(benchVarPath(id)), rolloutMeta(changeBenchDebounce.String()))
	job.Update = &api.UpdateStrategy{MaxParallel: new(0)}
	return job
}

// runningPerJob counts the allocations of the default namespace that run with every task
// running, with one listing.
func runningPerJob(ctx context.Context, client *api.Client) int {
	stubs, _, err := client.Allocations().List((&api.QueryOptions{Namespace: "default"}).WithContext(ctx))
	if err != nil {
		return 0
	}
	n := 0
	for _, a := range stubs {
		if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusRunning && allTasksRunning(a) {
			n++
		}
	}
	return n
}

func allTasksRunning(a *api.AllocationListStub) bool {
	for _, ts := range a.TaskStates {
		if ts.State != "running" {
			return false
		}
	}
	return len(a.TaskStates) > 0
}

// waitQuiet waits until the agent has sent nothing for a second, apart from blocking
// queries waiting: it has read what it needs and only watches.
func waitQuiet(b *testing.B, ctx context.Context, wire *wireLog) {
	simtest.WaitFor(b, ctx, "the agent settling", func() bool {
		last, busy := wire.lastNonBlocking()
		return busy == 0 && time.Since(last) > time.Second
	})
}

// writeChanges writes each job's variable once, changeBenchGap apart, and returns when each
// write returned, on the simulated cluster's clock.
func writeChanges(b *testing.B, e *env, jobs []string, indexes map[string]uint64) map[string]time.Time {
	out := map[string]time.Time{}
	for i, job := range jobs {
		if i > 0 {
			time.Sleep(changeBenchGap)
		}
		v := &api.Variable{Namespace: "default", Path: benchVarPath(job), Items: map[string]string{"greeting": "bonjour"}, ModifyIndex: indexes[job]}
		if _, _, err := e.Client.Variables().CheckedUpdate(v, nil); err != nil {
			b.Fatalf("changing variable %s: %v", v.Path, err)
		}
		out[job] = e.Sim.Now()
	}
	return out
}

// restartSignals waits until each job's first restart request has reached the simulated
// cluster, and returns when: its allocations' earliest Restart Signaled event.
func restartSignals(b *testing.B, ctx context.Context, e *env, jobs []string) map[string]time.Time {
	signaled := map[string]time.Time{}
	simtest.WaitFor(b, ctx, "a restart request reaching Nomad for every changed job", func() bool {
		for _, job := range jobs {
			if _, ok := signaled[job]; !ok {
				if at := firstRestartSignal(b, ctx, e.Client, job); !at.IsZero() {
					signaled[job] = at
				}
			}
		}
		return len(signaled) == len(jobs)
	})
	return signaled
}

// firstRestartSignal is the earliest Restart Signaled event among the job's allocations.
func firstRestartSignal(b *testing.B, ctx context.Context, client *api.Client, job string) time.Time {
	stubs, _, err := client.Jobs().Allocations(job, false, (&api.QueryOptions{Namespace: "default"}).WithContext(ctx))
	if err != nil {
		b.Fatalf("listing the allocations of %s: %v", job, err)
	}
	var first time.Time
	for _, a := range stubs {
		for _, ts := range a.TaskStates {
			for _, ev := range ts.Events {
				if ev.Type != api.TaskRestartSignal {
					continue
				}
				if at := time.Unix(0, ev.Time); first.IsZero() || at.Before(first) {
					first = at
				}
			}
		}
	}
	return first
}

// waitRollouts waits until each changed job's rollout has ended, and fails the benchmark
// unless each succeeded and no other job was rolled; it returns when each was filed (its
// Created event).
func waitRollouts(b *testing.B, ctx context.Context, e *env, jobs []string) map[string]time.Time {
	var recs []*restart.Record
	simtest.WaitFor(b, ctx, "a rollout recorded for every changed job", func() bool {
		var err error
		recs, err = e.Store.List(ctx, store.Filter{Namespace: "default"})
		return err == nil && len(recs) >= len(jobs)
	})
	filed := map[string]time.Time{}
	for _, rec := range recs {
		for _, ev := range rec.Events {
			if ev.Type == restart.EventCreated {
				filed[rec.JobID] = ev.Time
			}
		}
		if !slices.Contains(jobs, rec.JobID) {
			b.Errorf("job %s was rolled, but its variable did not change", rec.JobID)
		}
		if final := e.WaitEnd(b, rec); final.Status != restart.StatusSucceeded {
			b.Errorf("the rollout of %s ended %s: %s", rec.JobID, final.Status, final.Reason)
		}
	}
	if len(recs) != len(jobs) {
		b.Errorf("%d rollouts recorded for %d changes to different jobs", len(recs), len(jobs))
	}
	return filed
}

// medianOf is the median of sorted durations.
func medianOf(ds []time.Duration) time.Duration {
	switch n := len(ds); {
	case n == 0:
		return 0
	case n%2 == 1:
		return ds[n/2]
	default:
		return (ds[n/2-1] + ds[n/2]) / 2
	}
}

// byEndpoint summarizes requests as "N METHOD /path-shape" by count, most first.
func byEndpoint(reqs []wireReq) string {
	counts := map[string]int{}
	for _, r := range reqs {
		counts[r.shape()]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return counts[keys[i]] > counts[keys[j]] || counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	return strings.Join(parts, ", ")
}

// followCount is a slog handler that counts the change runner's "following a job" lines.
type followCount struct {
	mu    sync.Mutex
	count int
}

func (f *followCount) Enabled(context.Context, slog.Level) bool { return true }
func (f *followCount) WithAttrs([]slog.Attr) slog.Handler       { return f }
func (f *followCount) WithGroup(string) slog.Handler            { return f }

func (f *followCount) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "following a job for config-change rollouts" {
		f.mu.Lock()
		f.count++
		f.mu.Unlock()
	}
	return nil
}

func (f *followCount) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

// wireLog watches an agent's transports: every request it sends (when, what, blocking or
// not), the blocking queries in flight (a request with ?index= holds its connection until
// its body is closed), and the connections open.
type wireLog struct {
	mu        sync.Mutex
	reqs      []wireReq
	busy      int // requests other than blocking queries in flight
	blocking  int
	peakBlock int
	conns     int
	peakConn  int
	lastPlain time.Time
}

type wireReq struct {
	at       time.Time
	method   string
	path     string
	blocking bool
}

// shape is the request's endpoint with its identifiers elided, and "?index" when blocking.
func (r wireReq) shape() string {
	segs := strings.Split(r.path, "/")
	for i, s := range segs {
		if len(s) >= 20 || (i > 0 && (segs[i-1] == "job" || segs[i-1] == "var") && s != "") {
			segs[i] = ":id"
		}
	}
	p := r.method + " " + strings.Join(segs, "/")
	if strings.HasPrefix(r.path, "/v1/var/") {
		p = r.method + " /v1/var/…"
	}
	if r.blocking {
		p += "?index"
	}
	return p
}

func (w *wireLog) wrap(next http.RoundTripper) http.RoundTripper {
	return wireRoundTrip(func(r *http.Request) (*http.Response, error) {
		blocking := r.Method == http.MethodGet && r.URL.Query().Get("index") != ""
		w.start(r, blocking)
		resp, err := next.RoundTrip(r)
		if err != nil || !blocking {
			w.done(blocking)
			return resp, err
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{resp.Body, &closeHook{c: resp.Body, onClose: func() { w.done(true) }}}
		return resp, nil
	})
}

func (w *wireLog) start(r *http.Request, blocking bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reqs = append(w.reqs, wireReq{at: now, method: r.Method, path: r.URL.Path, blocking: blocking})
	if blocking {
		w.blocking++
		w.peakBlock = max(w.peakBlock, w.blocking)
		return
	}
	w.busy++
	w.lastPlain = now
}

func (w *wireLog) done(blocking bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if blocking {
		w.blocking--
		return
	}
	w.busy--
	w.lastPlain = time.Now()
}

// dial wraps a transport's dialer to count the connections open.
func (w *wireLog) dial(next func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.conns++
		w.peakConn = max(w.peakConn, w.conns)
		w.mu.Unlock()
		return &countedConn{Conn: conn, hook: &closeHook{c: conn, onClose: func() {
			w.mu.Lock()
			w.conns--
			w.mu.Unlock()
		}}}, nil
	}
}

func (w *wireLog) since(t time.Time) []wireReq {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := sort.Search(len(w.reqs), func(i int) bool { return !w.reqs[i].at.Before(t) })
	return slices.Clone(w.reqs[i:])
}

// lastNonBlocking is when the last request other than a blocking query started or ended,
// and how many are in flight.
func (w *wireLog) lastNonBlocking() (time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastPlain, w.busy
}

// wireCounts are the connections open and the blocking queries in flight, now and at most
// at once.
type wireCounts struct{ conns, blocking, peakConns, peakBlocking int }

func (w *wireLog) counts() wireCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return wireCounts{w.conns, w.blocking, w.peakConn, w.peakBlock}
}

type wireRoundTrip func(*http.Request) (*http.Response, error)

func (f wireRoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeHook closes c, calling onClose once, at its first Close.
type closeHook struct {
	c       io.Closer
	once    sync.Once
	onClose func()
}

func (h *closeHook) Close() error {
	h.once.Do(h.onClose)
	return h.c.Close()
}

// countedConn is a connection closed through its hook.
type countedConn struct {
	net.Conn
	hook *closeHook
}

func (c *countedConn) Close() error { return c.hook.Close() }
