package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// driverOverlaps returns a description of every moment the record's events show a driver
// taking over while another had not let go: the record of two drivers at once.
func driverOverlaps(rec *restart.Record) []string {
	var bad []string
	holding := false
	for _, ev := range rec.Events {
		switch {
		case ev.Type == restart.EventStarted:
			if holding {
				bad = append(bad, fmt.Sprintf("event %d: started while driven", ev.Seq))
			}
			holding = true
		case ev.Type == restart.EventDriver && strings.Contains(ev.Message, "took over"):
			if holding {
				bad = append(bad, fmt.Sprintf("event %d: %q while another driver held it", ev.Seq, ev.Message))
			}
			holding = true
		case ev.Type == restart.EventDriver && strings.Contains(ev.Message, "detached"):
			holding = false
		}
	}
	return bad
}

func driverEvents(rec *restart.Record) (started, tookOver, detached int) {
	for _, ev := range rec.Events {
		switch {
		case ev.Type == restart.EventStarted:
			started++
		case ev.Type == restart.EventDriver && strings.Contains(ev.Message, "took over"):
			tookOver++
		case ev.Type == restart.EventDriver && strings.Contains(ev.Message, "detached"):
			detached++
		}
	}
	return
}

func TestAdoptsDetachedRestartAndServesPages(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.register(t, "default", "web", 4, nil)
	rec := e.detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}})

	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	start(t, a)

	final := e.waitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s), want succeeded", final.Status, final.Reason)
	}
	if final.Driver != "" && final.Driver != "agent-1" {
		t.Errorf("record names driver %q", final.Driver)
	}
	e.checkOnce(t, final)
	if bad := driverOverlaps(final); bad != nil {
		t.Errorf("driver overlaps: %v", bad)
	}

	m := a.Metrics()
	ctx := testContext(t)
	// The drive's outcome is recorded just after the record's last write.
	simtest.WaitFor(t, ctx, "the lease release to be counted", func() bool {
		return testutil.ToFloat64(m.leases.WithLabelValues("released")) == 1
	})
	if got := testutil.ToFloat64(m.allocs.WithLabelValues("restarted")); got != 4 {
		t.Errorf("allocations restarted = %v, want 4", got)
	}
	if got := testutil.ToFloat64(m.leases.WithLabelValues("acquired")); got != 1 {
		t.Errorf("leases acquired = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.batchSeconds); got != 1 {
		t.Errorf("batch histogram series = %d", got)
	}

	body := get(t, srv.URL+"/healthz", http.StatusOK)
	if !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/healthz = %s", body)
	}
	metrics := get(t, srv.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		`nomad_restart_restarts{status="succeeded"} 1`,
		`nomad_restart_allocations_total{result="restarted"} 4`,
		`nomad_restart_batch_duration_seconds_count 2`,
		`nomad_restart_health_gate_wait_seconds_count 4`,
		`nomad_restart_lease_changes_total{change="acquired"} 1`,
		`nomad_restart_nomad_api_requests_total`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	page := get(t, srv.URL+"/", http.StatusOK)
	for _, want := range []string{rec.ID, `aria-valuenow="100"`, "succeeded", `data-stream="/events"`} {
		if !strings.Contains(page, want) {
			t.Errorf("list page lacks %q", want)
		}
	}
	detail := get(t, srv.URL+"/restart/"+rec.ID[:8], http.StatusOK)
	for _, a := range final.Allocs {
		if !strings.Contains(detail, a.ID[:8]) {
			t.Errorf("detail page lacks allocation %s", a.ID[:8])
		}
	}
	if n := strings.Count(detail, `data-state="done"`); n != 4 {
		t.Errorf("detail page shows %d done allocations, want 4", n)
	}
	get(t, srv.URL+"/restart/ffffffff", http.StatusNotFound)
}

func get(t testing.TB, url string, code int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %d, want %d: %s", url, resp.StatusCode, code, b)
	}
	return string(b)
}

func TestHealthzUnavailableBeforeRun(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	get(t, srv.URL+"/healthz", http.StatusServiceUnavailable)
	stop := start(t, a)
	ctx := testContext(t)
	simtest.WaitFor(t, ctx, "the agent to be ready", a.Ready)
	get(t, srv.URL+"/healthz", http.StatusOK)
	stop()
	get(t, srv.URL+"/healthz", http.StatusServiceUnavailable)
}

// Several agents share restarts; each restart is driven by one agent at a time, each
// allocation restarted once.
func TestTwoAgentsNeverDriveOneRestartAtOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	const jobs = 6
	var recs []*restart.Record
	for _, id := range e.registerMany(t, "default", "svc", jobs, 3) {
		recs = append(recs, e.detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a1 := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	a2 := e.newAgent(t, "agent-2", e.sim.BootstrapToken(), nil)
	start(t, a1)
	start(t, a2)
	for _, rec := range recs {
		final := e.waitSucceeded(t, rec)
		if s, took, _ := driverEvents(final); s != 1 || took != 0 {
			t.Errorf("restart of %s: started %d times, taken over %d times; want one driver", rec.JobID, s, took)
		}
		e.checkOnce(t, final)
	}
	ctx := testContext(t)
	simtest.WaitFor(t, ctx, "both agents to count their adoptions", func() bool {
		return testutil.ToFloat64(a1.metrics.adoptions)+testutil.ToFloat64(a2.metrics.adoptions) == jobs
	})
}

// Cancelling an agent (SIGTERM) detaches its drives and releases their leases: another
// agent takes over at once and finishes each allocation exactly once.
func TestSIGTERMHandsOverToAnotherAgent(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	// Tasks that take 20 simulated seconds (0.4 s) to start keep each batch in flight long
	// enough that every restart is still mid-way when the first agent stops.
	meta := map[string]string{"nomadsim.start_delay": "20s"}
	const jobs = 2
	var recs []*restart.Record
	for i := range jobs {
		id := fmt.Sprintf("slow-%d", i)
		e.register(t, "default", id, 6, meta)
		recs = append(recs, e.detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a1 := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	stop1 := start(t, a1)
	ctx := testContext(t)
	simtest.WaitFor(t, ctx, "agent-1 to have restarted an allocation of every job", func() bool {
		for _, rec := range recs {
			r, err := e.store.Get(ctx, rec.Namespace, rec.ID)
			if err != nil || r.Status.Terminal() {
				return false
			}
			done := 0
			for _, a := range r.Allocs {
				if a.State == restart.AllocDone {
					done++
				}
			}
			if done == 0 {
				return false
			}
		}
		return true
	})
	a2 := e.newAgent(t, "agent-2", e.sim.BootstrapToken(), nil)
	start(t, a2)
	stop1() // returns once every drive of agent-1 detached and released its lease
	if n := len(a1.Driving()); n != 0 {
		t.Fatalf("agent-1 still drives %d restarts after stopping", n)
	}
	for _, rec := range recs {
		final := e.waitSucceeded(t, rec)
		if s, took, det := driverEvents(final); s != 1 || took != 1 || det != 1 {
			t.Errorf("restart of %s: started %d, taken over %d, detached %d; want 1 each", rec.JobID, s, took, det)
		}
		e.checkOnce(t, final)
	}
	if got := testutil.ToFloat64(a1.metrics.leases.WithLabelValues("released")); got != jobs {
		t.Errorf("agent-1 released %v leases, want %d", got, jobs)
	}
	if got := testutil.ToFloat64(a2.metrics.adoptions); got != jobs {
		t.Errorf("agent-2 adopted %v restarts, want %d", got, jobs)
	}
}

// One agent drives many restarts at once, within its concurrency bound.
func TestManyConcurrentRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under testing.Short: many jobs; run without -short")
	}
	t.Parallel()
	e := startEnv(t, nomadsim.Options{NodesPerDatacenter: 5})
	const jobs, bound = 50, 50
	var recs []*restart.Record
	t0 := time.Now()
	ids := e.registerMany(t, "default", "many", jobs, 1)
	t.Logf("registered %d jobs in %v", jobs, time.Since(t0))
	for _, id := range ids {
		recs = append(recs, e.detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) { c.Concurrency = bound })
	var peakMu sync.Mutex
	peak := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // sample the number of drives in flight
		for ctx.Err() == nil {
			n := len(a.Driving())
			peakMu.Lock()
			peak = max(peak, n)
			peakMu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Logf("created %d restarts at %v", jobs, time.Since(t0))
	start(t, a)
	for _, rec := range recs {
		final := e.waitEnd(t, rec)
		if final.Status != restart.StatusSucceeded {
			t.Errorf("restart of %s ended %s (%s)", rec.JobID, final.Status, final.Reason)
		}
		e.checkOnce(t, final)
	}
	t.Logf("all done at %v", time.Since(t0))
	cancel()
	peakMu.Lock()
	defer peakMu.Unlock()
	if peak > bound {
		t.Errorf("%d drives at once, above the bound of %d", peak, bound)
	}
	if peak < jobs/2 {
		t.Errorf("at most %d drives at once: the %d restarts were not driven concurrently", peak, jobs)
	}
}

// The concurrency bound holds: restarts beyond it wait for a drive to end, then run.
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	const jobs, bound = 6, 2
	var recs []*restart.Record
	for _, id := range e.registerMany(t, "default", "bound", jobs, 2) {
		recs = append(recs, e.detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) { c.Concurrency = bound })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var peakMu sync.Mutex
	peak := 0
	go func() {
		for ctx.Err() == nil {
			n := len(a.Driving())
			peakMu.Lock()
			peak = max(peak, n)
			peakMu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	start(t, a)
	for _, rec := range recs {
		if final := e.waitEnd(t, rec); final.Status != restart.StatusSucceeded {
			t.Errorf("restart of %s ended %s (%s)", rec.JobID, final.Status, final.Reason)
		}
	}
	cancel()
	peakMu.Lock()
	defer peakMu.Unlock()
	if peak > bound {
		t.Errorf("%d drives at once, above the bound of %d", peak, bound)
	}
}
