package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestAdoptsDetachedRestartAndServesPages(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 4, nil)
	rec := e.Detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}})

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	agenttest.Run(t, a)

	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s), want succeeded", final.Status, final.Reason)
	}
	if final.Driver != "" && final.Driver != "agent-1" {
		t.Errorf("record names driver %q", final.Driver)
	}
	e.CheckOnce(t, final)
	if bad := agenttest.DriverOverlaps(final); bad != nil {
		t.Errorf("driver overlaps: %v", bad)
	}

	m := a.Metrics()
	ctx := agenttest.Context(t)
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

	body := agenttest.Get(t, srv.URL+"/healthz", http.StatusOK)
	for _, path := range []string{"/healthz", "/metrics"} {
		// Another method is refused as such, not taken for a page that does not exist.
		if code, answer := agenttest.Post(t, srv.URL+path, nil, "{}"); code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d %s, want 405", path, code, answer)
		}
	}
	if !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/healthz = %s", body)
	}
	metrics := agenttest.Get(t, srv.URL+"/metrics", http.StatusOK)
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
	page := agenttest.Get(t, srv.URL+"/", http.StatusOK)
	for _, want := range []string{rec.ID, `aria-valuenow="100"`, "succeeded", `data-stream="/events"`} {
		if !strings.Contains(page, want) {
			t.Errorf("list page lacks %q", want)
		}
	}
	detail := agenttest.Get(t, srv.URL+"/restart/"+rec.ID[:8], http.StatusOK)
	for _, a := range final.Allocs {
		if !strings.Contains(detail, a.ID[:8]) {
			t.Errorf("detail page lacks allocation %s", a.ID[:8])
		}
	}
	if n := strings.Count(detail, `data-state="done"`); n != 4 {
		t.Errorf("detail page shows %d done allocations, want 4", n)
	}
	agenttest.Get(t, srv.URL+"/restart/ffffffff", http.StatusNotFound)
}

func TestHealthzUnavailableBeforeRun(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	agenttest.Get(t, srv.URL+"/healthz", http.StatusServiceUnavailable)
	stop := agenttest.Run(t, a)
	ctx := agenttest.Context(t)
	simtest.WaitFor(t, ctx, "the agent to be ready", a.Ready)
	agenttest.Get(t, srv.URL+"/healthz", http.StatusOK)
	stop()
	agenttest.Get(t, srv.URL+"/healthz", http.StatusServiceUnavailable)
}

// Several agents share restarts; each restart is driven by one agent at a time, each
// allocation restarted once.
func TestTwoAgentsNeverDriveOneRestartAtOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	const jobs = 6
	var recs []*restart.Record
	for _, id := range e.RegisterJobs(t, "default", "svc", jobs, 3, nil) {
		recs = append(recs, e.Detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a1)
	agenttest.Run(t, a2)
	for _, rec := range recs {
		final := e.WaitSucceeded(t, rec)
		if s, took, _ := agenttest.DriverEvents(final); s != 1 || took != 0 {
			t.Errorf("restart of %s: started %d times, taken over %d times; want one driver", rec.JobID, s, took)
		}
		e.CheckOnce(t, final)
	}
	ctx := agenttest.Context(t)
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
	meta := agenttest.SlowStart
	const jobs = 2
	var recs []*restart.Record
	for i := range jobs {
		id := fmt.Sprintf("slow-%d", i)
		e.Register(t, "default", id, 6, meta)
		recs = append(recs, e.Detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	stop1 := agenttest.Run(t, a1)
	ctx := agenttest.Context(t)
	simtest.WaitFor(t, ctx, "agent-1 to have restarted an allocation of every job", func() bool {
		for _, rec := range recs {
			r, err := e.Store.Get(ctx, rec.Namespace, rec.ID)
			if err != nil || r.Status.Terminal() || r.Progress(time.Now()).Done == 0 {
				return false
			}
		}
		return true
	})
	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a2)
	stop1() // returns once every drive of agent-1 detached and released its lease
	if n := len(a1.Driving()); n != 0 {
		t.Fatalf("agent-1 still drives %d restarts after stopping", n)
	}
	for _, rec := range recs {
		final := e.WaitSucceeded(t, rec)
		if s, took, det := agenttest.DriverEvents(final); s != 1 || took != 1 || det != 1 {
			t.Errorf("restart of %s: started %d, taken over %d, detached %d; want 1 each", rec.JobID, s, took, det)
		}
		e.CheckOnce(t, final)
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
	ids := e.RegisterJobs(t, "default", "many", jobs, 1, nil)
	t.Logf("registered %d jobs in %v", jobs, time.Since(t0))
	for _, id := range ids {
		recs = append(recs, e.Detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), func(c *Config) { c.Concurrency = bound })
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
	agenttest.Run(t, a)
	for _, rec := range recs {
		final := e.WaitEnd(t, rec)
		if final.Status != restart.StatusSucceeded {
			t.Errorf("restart of %s ended %s (%s)", rec.JobID, final.Status, final.Reason)
		}
		e.CheckOnce(t, final)
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
	for _, id := range e.RegisterJobs(t, "default", "bound", jobs, 2, nil) {
		recs = append(recs, e.Detached(t, "default", id, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}))
	}
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), func(c *Config) { c.Concurrency = bound })
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
	agenttest.Run(t, a)
	for _, rec := range recs {
		if final := e.WaitEnd(t, rec); final.Status != restart.StatusSucceeded {
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

// An agent whose token has no rights on the restarts' namespace sees nothing, drives
// nothing and shows nothing; an agent with the documented policy then finishes the restart.
func TestACLTokenWithoutRightsGetsNothingDone(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.Register(t, "default", "web", 3, nil)
	rec := e.Detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	ctx := agenttest.Context(t)

	weak, err := e.Sim.CreateToken("weak", map[string]string{
		"elsewhere": `namespace "elsewhere" { policy = "write" variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } } }`,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := e.newAgent(t, "weak-agent", weak, nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	stop := agenttest.Run(t, a)
	simtest.WaitFor(t, ctx, "a listing by the weak agent", func() bool {
		return testutil.ToFloat64(a.metrics.discoveryPass) >= 1 && a.Ready()
	})
	page := agenttest.Get(t, srv.URL+"/", http.StatusOK)
	if strings.Contains(page, rec.ID) || !strings.Contains(page, "No restarts.") {
		t.Errorf("the weak agent's page shows restarts it may not read:\n%s", page)
	}
	agenttest.Get(t, srv.URL+"/restart/"+rec.ID, http.StatusNotFound)
	stop()
	if got := testutil.ToFloat64(a.metrics.adoptions); got != 0 {
		t.Errorf("the weak agent adopted %v restarts", got)
	}
	cur, err := e.Store.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status != restart.StatusPending || cur.ModifyIndex != rec.ModifyIndex {
		t.Errorf("the weak agent changed the restart: status %s, index %d -> %d", cur.Status, rec.ModifyIndex, cur.ModifyIndex)
	}
	counts, err := simtest.CountRestarts(ctx, e.Client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(counts.InPlace) != 0 {
		t.Errorf("allocations restarted without the rights: %v", counts.InPlace)
	}

	// The agent policy of docs/acl.md (deploy/agent-policy.hcl) is enough.
	agentToken := e.ShippedToken(t, "agent")
	good := e.newAgent(t, "agent", agentToken, nil)
	agenttest.Run(t, good)
	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("with the agent policy the restart ended %s (%s)", final.Status, final.Reason)
	}
	e.CheckOnce(t, final)
}

// The operator policy of deploy/operator-policy.hcl is enough to file a restart for the
// agent (plan and create, as `run -detach` does), and the agent policy to drive it.
func TestACLShippedPoliciesSuffice(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.Register(t, "default", "web", 2, nil)
	opClient := e.shippedClient(t, "operator")
	op := agenttest.NomadParts(opClient)
	operator := engine.New(engine.Config{Cluster: op.Cluster, Store: op.Store, Holder: "operator"})
	ctx := agenttest.Context(t)
	p, err := operator.Plan(ctx, engine.Request{Namespace: "default", Job: "web"})
	if err != nil {
		t.Fatalf("planning with the operator policy: %v", err)
	}
	if err := operator.Create(ctx, p.Record); err != nil {
		t.Fatalf("filing the restart with the operator policy: %v", err)
	}
	agentToken := e.ShippedToken(t, "agent")
	a := e.newAgent(t, "agent", agentToken, nil)
	agenttest.Run(t, a)
	final := e.WaitEnd(t, p.Record)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	e.CheckOnce(t, final)
	if got := testutil.ToFloat64(a.metrics.apiErrors.WithLabelValues("403")); got != 0 {
		t.Errorf("the agent policy let %v requests be denied", got)
	}
}

// errDied is what a driver that "died" sees: from then on nothing it writes is stored.
var errDied = errors.New("driver process died")

// dyingStore makes an in-process driver die like a killed process: after a number of record
// writes every further write fails (nothing more reaches the store), and its lease is not
// released on the way out. The test then lets the lease go as the OS or Nomad would.
type dyingStore struct {
	store.Store
	writesLeft atomic.Int64 // >0: die after that many writes; 0: after the first one storing a done allocation
	died       atomic.Bool
	acquire    func(ctx context.Context, ns, id, holder string) (store.Lease, error)

	mu    sync.Mutex
	lease store.Lease // the real lease, held past the driver's death
}

func (s *dyingStore) Update(ctx context.Context, rec *restart.Record) error {
	if s.died.Load() || (s.writesLeft.Load() > 0 && s.writesLeft.Add(-1) < 0) {
		return errDied
	}
	if err := s.Store.Update(ctx, rec); err != nil {
		return err
	}
	// With writesLeft 0 (the default) the driver dies right after the first write that
	// stores an allocation done: mid-restart, whatever the engine groups into its writes.
	if s.writesLeft.Load() == 0 && rec.Progress(time.Now()).Done > 0 {
		s.died.Store(true)
	}
	return nil
}

func (s *dyingStore) AcquireLease(ctx context.Context, ns, id, holder string) (store.Lease, error) {
	acq := s.Store.AcquireLease
	if s.acquire != nil {
		acq = s.acquire
	}
	l, err := acq(ctx, ns, id, holder)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.lease = l
	s.mu.Unlock()
	return keptLease{l}, nil
}

// keptLease is a lease its dying driver cannot release.
type keptLease struct{ store.Lease }

func (keptLease) Release(context.Context) error { return nil }

// crashDriver drives rec until the driver dies mid-restart: after its first write that
// stores an allocation done.
func crashDriver(t *testing.T, cl cluster.Cluster, ds *dyingStore, rec *restart.Record) {
	t.Helper()
	e := engine.New(engine.Config{Cluster: cl, Store: ds, Holder: "cli:doomed"})
	ctx := agenttest.Context(t)
	_, err := e.Drive(ctx, rec.Namespace, rec.ID, nil)
	if !errors.Is(err, errDied) {
		t.Fatalf("the doomed driver ended with %v, want it to die", err)
	}
}

func midRestart(t *testing.T, s store.Store, rec *restart.Record) {
	t.Helper()
	cur, err := s.Get(context.Background(), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status != restart.StatusRunning || cur.Progress(time.Now()).Done == 0 {
		t.Fatalf("the doomed driver left the restart %s with %d done; want it running mid-way", cur.Status, cur.Progress(time.Now()).Done)
	}
}

// Local store: the dead driver's flock is freed at once, and the agent (listing every
// PollEvery) adopts the restart and finishes it exactly once.
func TestAdoptsAfterDriverDiesLocalStore(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	local, err := localstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.Register(t, "default", "web", 4, nil)
	cl := cluster.NewNomad(e.Client)
	pl := engine.New(engine.Config{Cluster: cl, Store: local, Holder: "cli:detached"})
	ctx := agenttest.Context(t)
	p, err := pl.Plan(ctx, engine.Request{Namespace: "default", Job: "web", Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}
	rec := p.Record

	ds := &dyingStore{Store: local}
	crashDriver(t, cl, ds, rec)
	midRestart(t, local, rec)

	c := Config{Cluster: cl, Store: local, Holder: "agent-1", PollEvery: 20 * time.Millisecond, ViewMaxAge: time.Millisecond}
	finishParts(&c, engine.HealthConfig{})
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Run(t, a)
	// While the dead driver's lease is held (the process has not exited yet), nothing moves.
	simtest.WaitFor(t, ctx, "the agent to try the held lease", func() bool {
		return a.metrics.leases.WithLabelValues("held_elsewhere") != nil && counterValue(a.metrics.leases.WithLabelValues("held_elsewhere")) >= 1
	})
	ds.mu.Lock()
	lease := ds.lease
	ds.mu.Unlock()
	if err := lease.Release(ctx); err != nil { // the kernel drops the dead process's flock
		t.Fatal(err)
	}
	e.checkTakenOverOnce(t, agenttest.WaitEnd(t, local, rec))
}

// Nomad store: the dead driver's lock expires after its TTL (Nomad's minimum, 10s, which
// Nomad's leader doubles) and lock delay; the blocking list wakes the agent when Nomad
// releases it, and the agent finishes the restart exactly once. One case: it takes ~20s.
func TestAdoptsAfterDriverDiesNomadStore(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under testing.Short: waits for a Nomad lock TTL (about 20s); run without -short")
	}
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 4, nil)
	rec := e.Detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	cl := cluster.NewNomad(e.Client)
	ds := &dyingStore{Store: e.Store}
	// The doomed driver's lock: the store's lease path, taken without renewals, as a
	// driver that is killed right after taking it leaves it.
	ds.acquire = func(ctx context.Context, ns, id, holder string) (store.Lease, error) {
		taken, err := e.DeadDriverLock(ctx, ns, e.RestartLeasePath(t, ns, id), holder)
		if err != nil {
			return nil, err
		}
		if !taken {
			return nil, store.ErrLeaseHeld
		}
		return deadLease{}, nil
	}
	crashDriver(t, cl, ds, rec)
	midRestart(t, e.Store, rec)

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a)
	e.checkTakenOverOnce(t, e.WaitEnd(t, rec))
}

// A `run` killed right after it filed its restart, before its first batch, leaves the
// restart with its lease held (taken with the record): the agent leaves it alone while
// the lease is held, and takes it up once Nomad expires it, restarting each allocation once.
func TestAdoptsARestartWhoseCreatorDiedBeforeDriving(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 2, nil)
	ctx := agenttest.Context(t)
	cl := cluster.NewNomad(e.Client)
	// The creator's lock delay is short: the test waits it out once its lock expired.
	creator := engine.New(engine.Config{Cluster: cl, Holder: "cli:killed",
		Store: nomadstore.NewRestarts(e.Vars, nomadstore.Options{LockDelay: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})})
	p, err := creator.Plan(ctx, engine.Request{Namespace: "default", Job: "web", Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := creator.CreateHeld(ctx, p.Record)
	if err != nil {
		t.Fatal(err)
	}
	rec := h.Record()

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a)
	simtest.WaitFor(t, ctx, "the agent to find the restart's lease held", func() bool {
		return counterValue(a.metrics.leases.WithLabelValues("held_elsewhere")) >= 1
	})
	if cur, err := e.Store.Get(ctx, rec.Namespace, rec.ID); err != nil || cur.Status != restart.StatusPending {
		t.Fatalf("the restart moved while its creator held the lease: %v, %+v", err, cur)
	}
	// The creator dies: Nomad hears no more renewals and expires its lock.
	if !e.Sim.ExpireLock(rec.Namespace, e.RestartLeasePath(t, rec.Namespace, rec.ID)) {
		t.Fatal("the creator held no lock on the restart's lease")
	}
	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	if s, took, _ := agenttest.DriverEvents(final); s != 1 || took != 0 {
		t.Errorf("started %d, taken over %d; want the agent to start it once", s, took)
	}
	if got := counterValue(a.metrics.adoptions); got != 1 {
		t.Errorf("the agent took up %v restarts, want 1", got)
	}
	e.CheckOnce(t, final)
}

type deadLease struct{}

func (deadLease) Lost() <-chan struct{}         { return nil }
func (deadLease) Release(context.Context) error { return nil }

// checkTakenOverOnce fails the test unless the restart that ended as final succeeded,
// started once and was taken over by the agent once, each allocation restarted once.
func (e *env) checkTakenOverOnce(t *testing.T, final *restart.Record) {
	t.Helper()
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	if s, took, _ := agenttest.DriverEvents(final); s != 1 || took != 1 {
		t.Errorf("started %d, taken over %d; want the agent to take over once", s, took)
	}
	e.CheckOnce(t, final)
}
