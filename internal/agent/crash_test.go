package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

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
	ctx := testContext(t)
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
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.register(t, "default", "web", 4, nil)
	cl := cluster.NewNomad(e.client)
	pl := engine.New(engine.Config{Cluster: cl, Store: local, Holder: "cli:detached"})
	ctx := testContext(t)
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

	a, err := New(Config{Cluster: cl, Store: local, Holder: "agent-1", PollEvery: 20 * time.Millisecond, ViewMaxAge: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
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
	final := waitEndIn(t, local, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	if s, took, _ := driverEvents(final); s != 1 || took != 1 {
		t.Errorf("started %d, taken over %d; want the agent to take over once", s, took)
	}
	e.checkOnce(t, final)
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
	e.register(t, "default", "web", 4, nil)
	rec := e.detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	cl := cluster.NewNomad(e.client)
	ds := &dyingStore{Store: e.store}
	// The doomed driver's lock: the store's lease path, taken without renewals, as a
	// driver that is killed right after taking it leaves it.
	ds.acquire = func(ctx context.Context, ns, id, holder string) (store.Lease, error) {
		path := leasePath(t, e, ns, id)
		v := &api.Variable{Namespace: ns, Path: path, Items: map[string]string{"holder": holder},
			Lock: &api.VariableLock{TTL: "10s", LockDelay: "100ms"}}
		got, _, err := e.client.Variables().AcquireLock(v, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if got.LockID() == "" {
			return nil, store.ErrLeaseHeld
		}
		return deadLease{}, nil
	}
	crashDriver(t, cl, ds, rec)
	midRestart(t, e.store, rec)

	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	start(t, a)
	final := e.waitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	if s, took, _ := driverEvents(final); s != 1 || took != 1 {
		t.Errorf("started %d, taken over %d; want the agent to take over once", s, took)
	}
	e.checkOnce(t, final)
}

type deadLease struct{}

func (deadLease) Lost() <-chan struct{}         { return nil }
func (deadLease) Release(context.Context) error { return nil }

// leasePath finds the lease variable's path of restart id: beside its head.
func leasePath(t *testing.T, e *env, ns, id string) string {
	t.Helper()
	metas, _, err := e.client.Variables().PrefixList("nomad-restart/", &api.QueryOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metas {
		if len(m.Path) >= len(id) && m.Path[len(m.Path)-len(id):] == id {
			return m.Path + "/lease"
		}
	}
	t.Fatalf("no head variable for restart %s", id)
	return ""
}

func waitEndIn(t *testing.T, s store.Store, rec *restart.Record) *restart.Record {
	t.Helper()
	ctx := testContext(t)
	cur := rec
	for !cur.Status.Terminal() {
		next, err := s.Watch(ctx, rec.Namespace, rec.ID, cur.ModifyIndex)
		if err != nil {
			t.Fatalf("restart %s did not end (last status %s): %v", rec.ID, cur.Status, err)
		}
		cur = next
	}
	return cur
}
