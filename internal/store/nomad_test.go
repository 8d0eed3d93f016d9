package store_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func simClient(t testing.TB, c *nomadsim.Cluster, token string) *api.Client {
	t.Helper()
	cl, err := c.APIClient(token)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// quiet discards the warnings a lost lease logs on purpose in these tests.
var quiet = slog.New(slog.DiscardHandler)

func TestNomadSuite(t *testing.T) {
	storetest.RunSuite(t, func(t *testing.T) storetest.Backend {
		c := simtest.Start(t, nomadsim.Options{})
		return storetest.Backend{BellOnly: true, Open: func(t *testing.T) store.Store {
			return store.NewNomad(simClient(t, c, ""), store.NomadOptions{})
		}}
	})
}

// A lease that Nomad no longer holds for its driver (here another client released the
// lock; in life its TTL ran out during a partition) is lost, Lost says so at the next
// renewal, and another driver takes the lease.
func TestNomadLeaseLostWhenTakenAway(t *testing.T) {
	cl, s := startNomadStore(t, store.NomadOptions{RenewEvery: 20 * time.Millisecond, Logger: quiet})
	ctx := testContext(t, 30*time.Second)
	rec := createRecord(t, ctx, s, "default", "web", 1)
	l := storetest.MustLease(t, ctx, s, rec, "driver")
	path := "nomad-restart/web/" + rec.ID + "/lease"
	v, _, err := cl.Variables().Read(path, nil)
	if err != nil || v.LockID() == "" {
		t.Fatalf("reading the lease variable: %v, %+v", err, v)
	}
	if _, _, err := cl.Variables().ReleaseLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: v.LockID()}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the lock was released under the lease but Lost was never closed")
	}
	l2, err := s.AcquireLease(ctx, "default", rec.ID, "driver-2")
	if err != nil {
		t.Fatalf("AcquireLease after the lease was lost: %v", err)
	}
	_ = l.Release(ctx) // releasing a lost lease is harmless, and must not free l2's lock
	if _, err := s.AcquireLease(ctx, "default", rec.ID, "driver-3"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("the lost lease's Release freed its successor's lock: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lease whose renewals cannot reach Nomad for a whole TTL is lost.
func TestNomadLeaseLostWhenUnreachable(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	s := store.NewNomad(simClient(t, c, ""), store.NomadOptions{RenewEvery: 20 * time.Millisecond, Logger: quiet})
	ctx := testContext(t, 30*time.Second)
	rec := createRecord(t, ctx, s, "default", "web", 1)
	l := storetest.MustLease(t, ctx, s, rec, "driver")
	_ = c.Close()
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("Nomad was unreachable for many TTLs but Lost was never closed")
	}
}

// A held lease is renewed on schedule and stays ours.
func TestNomadLeaseRenewed(t *testing.T) {
	_, cnt, s := startCountedStore(t, store.NomadOptions{RenewEvery: 10 * time.Millisecond})
	ctx := testContext(t, 30*time.Second)
	rec := createRecord(t, ctx, s, "default", "web", 1)
	l := storetest.MustLease(t, ctx, s, rec, "driver")
	for cnt.count("PUT lock-renew") < 5 {
		select {
		case <-l.Lost():
			t.Fatal("a renewed lease was lost")
		case <-ctx.Done():
			t.Fatalf("only %d renewals were sent", cnt.count("PUT lock-renew"))
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := s.AcquireLease(ctx, "default", rec.ID, "other"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireLease of a renewed lease: got %v, want ErrLeaseHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Released: no more renewals, and the lease is free at once.
	after := cnt.count("PUT lock-renew")
	time.Sleep(50 * time.Millisecond)
	if n := cnt.count("PUT lock-renew"); n != after {
		t.Fatalf("%d renewals were sent after Release", n-after)
	}
	storetest.TakeFreeLease(t, ctx, s, rec, "other", "after Release")
}

func TestNomadACLs(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	ctx := context.Background()

	reader, err := c.CreateToken("reader", map[string]string{"reader": `namespace "default" { policy = "read" }`})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := c.CreateToken("restarter", map[string]string{"restarter": `
namespace "default" {
  policy = "read"
  variables {
    path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] }
  }
}`})
	if err != nil {
		t.Fatal(err)
	}

	probes := []struct {
		name   string
		token  string
		wantOK bool
	}{
		{"management", c.BootstrapToken(), true},
		{"variables writer", writer, true},
		{"reader", reader, false},
	}
	for _, p := range probes {
		err := store.ProbeNomad(ctx, simClient(t, c, p.token), "default", "web")
		if (err == nil) != p.wantOK {
			t.Errorf("ProbeNomad with the %s token: %v, want ok=%v", p.name, err, p.wantOK)
		}
		if !p.wantOK {
			var perm *store.PermissionError
			if !errors.As(err, &perm) || perm.Namespace != "default" {
				t.Errorf("ProbeNomad with the %s token: got %v, want a PermissionError", p.name, err)
			}
		}
	}

	// The reader cannot create a record, and is told what to grant.
	rs := store.NewNomad(simClient(t, c, reader), store.NomadOptions{})
	err = rs.Create(ctx, storetest.NewRecord("default", "web", 1))
	var perm *store.PermissionError
	if !errors.As(err, &perm) || perm.Capability != "write" {
		t.Fatalf("Create with a read-only token: got %v, want a PermissionError for write", err)
	}
	for _, want := range []string{`"write"`, `nomad-restart/`, `namespace "default"`, "-state local"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not mention %s", err, want)
		}
	}

	// The writer's token is enough for the whole life of a restart.
	ws := store.NewNomad(simClient(t, c, writer), store.NomadOptions{})
	rec := storetest.NewRecord("default", "web", 3)
	if err := ws.Create(ctx, rec); err != nil {
		t.Fatalf("Create with a variables writer token: %v", err)
	}
	if _, err := ws.Find(ctx, "default", rec.ID[:6]); err != nil {
		t.Fatalf("Find: %v", err)
	}
	rec.Status = "succeeded"
	if err := ws.Update(ctx, rec); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func TestProbeNomadWithoutACLs(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	if err := store.ProbeNomad(context.Background(), simClient(t, c, ""), "default", "web"); err != nil {
		t.Fatalf("ProbeNomad with ACLs disabled: %v", err)
	}
}

// Watch is a blocking query: while nothing changes it holds one request open instead of
// polling.
func TestNomadWatchBlocks(t *testing.T) {
	_, cnt, s := startCountedStore(t, store.NomadOptions{})
	rec := storetest.NewRecord("default", "web", 1)
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	before := cnt.count("GET")
	ctx := testContext(t, 300*time.Millisecond)
	if _, err := s.Watch(ctx, "default", rec.ID, rec.ModifyIndex); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch: got %v, want the context's deadline", err)
	}
	if n := cnt.count("GET") - before; n > 2 {
		t.Fatalf("an idle Watch sent %d requests: it polls instead of blocking", n)
	}
}

// Chunks replaced by an update are deleted, and a finished record's orphans (chunks of a
// writer that died before writing its head) are swept.
func TestNomadChunksCleanedUp(t *testing.T) {
	cl, s := startNomadStore(t, store.NomadOptions{})
	ctx := context.Background()
	rec := createRecord(t, ctx, s, "default", "big", 3000)
	head := "nomad-restart/big/" + rec.ID
	chunkVars := func() (listed, named int) {
		t.Helper()
		return chunkVariables(t, cl, head)
	}
	if listed, named := chunkVars(); named < 2 || listed != named {
		t.Fatalf("after Create: %d chunk variables, head names %d", listed, named)
	}
	for i := range 5 {
		rec.Allocs[i*500].State = "done"
		if err := s.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	// Replaced chunks are deleted off the writer's path: soon, not before Update returns.
	for deadline := time.Now().Add(10 * time.Second); ; {
		listed, named := chunkVars()
		if listed == named {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after updates: %d chunk variables, head names %d: replaced chunks leaked", listed, named)
		}
		time.Sleep(20 * time.Millisecond)
	}
	orphan := &api.Variable{Path: head + "/c/a0123456789abcdef-deadbeef", Items: map[string]string{"data": "x"}}
	if _, _, err := cl.Variables().Create(orphan, nil); err != nil {
		t.Fatal(err)
	}
	rec.Status = "succeeded"
	if err := s.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if listed, named := chunkVars(); listed != named {
		t.Fatalf("after the end: %d chunk variables, head names %d: the orphan was not swept", listed, named)
	}
	got, err := store.NewNomad(cl, store.NomadOptions{}).Get(ctx, "default", rec.ID)
	if err != nil || len(got.Allocs) != 3000 || got.Allocs[2000].State != "done" {
		t.Fatalf("record after clean-up: %v", err)
	}
}

// A job marker left naming a restart that does not exist (its creator died between the
// two writes, or the record was deleted by hand) does not block the job.
func TestNomadStaleMarkerIsFree(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	cl := simClient(t, c, "")
	marker := &api.Variable{Path: "nomad-restart/web/active", Items: map[string]string{"restart": "00000000-0000-4000-8000-000000000000"}}
	if _, _, err := cl.Variables().Create(marker, nil); err != nil {
		t.Fatal(err)
	}
	s := store.NewNomad(cl, store.NomadOptions{})
	checkStaleMarkerIsFree(t, s)
}

// On a cluster that fails some variable requests (5xx and dropped connections), a big
// record still round-trips, updates and leases work: passing failures are retried and no
// write is lost or doubled.
func TestNomadUnderFaults(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{Seed: 7})
	c.SetFault(nomadsim.Fault{Path: "/v1/var", ErrorRate: 0.05, Status: 500, Body: "rpc error: No cluster leader"})
	c.SetFault(nomadsim.Fault{Path: "/v1/var", ErrorRate: 0.02, Drop: true})
	ctx := testContext(t, 60*time.Second)
	s := store.NewNomad(simClient(t, c, ""), store.NomadOptions{Logger: quiet})
	rec := storetest.NewRecord("default", "big", 3000)
	if err := s.Create(ctx, rec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for i := range 10 {
		rec.Allocs[i*300].State = "done"
		if err := s.Update(ctx, rec); err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
	}
	got, err := store.NewNomad(simClient(t, c, ""), store.NomadOptions{}).Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatalf("Get from a fresh handle: %v", err)
	}
	if got.ModifyIndex != rec.ModifyIndex || len(got.Allocs) != 3000 || got.Allocs[2700].State != "done" || got.Allocs[2701].State != "pending" {
		t.Fatalf("read back index %d (want %d), %d allocs", got.ModifyIndex, rec.ModifyIndex, len(got.Allocs))
	}
	const workers, each = 3, 4
	errs := make(chan error, workers)
	for range workers {
		go func() {
			h := store.NewNomad(simClient(t, c, ""), store.NomadOptions{})
			for range each {
				if _, err := store.Mutate(ctx, h, "default", rec.ID, func(r *restart.Record) error { r.CurrentBatch++; return nil }); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("Mutate: %v", err)
		}
	}
	got, err = s.Get(ctx, "default", rec.ID)
	if err != nil || got.CurrentBatch != workers*each {
		t.Fatalf("after concurrent Mutates: %v, CurrentBatch %d, want %d", err, got.CurrentBatch, workers*each)
	}
	l, err := s.AcquireLease(ctx, "default", rec.ID, "driver")
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A watch outlives a lost leader: it resumes when the cluster answers again and still sees
// the update.
func TestNomadWatchSurvivesLeaderLoss(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{TimeScale: 10})
	s := store.NewNomad(simClient(t, c, ""), store.NomadOptions{Logger: quiet})
	ctx := testContext(t, 30*time.Second)
	rec := createRecord(t, ctx, s, "default", "web", 1)
	type result struct {
		idx uint64
		err error
	}
	done := make(chan result, 1)
	c.LoseLeader(5 * time.Second) // 500 ms of real time
	go func() {
		r, err := s.Watch(ctx, "default", rec.ID, rec.ModifyIndex)
		if err != nil {
			done <- result{0, err}
			return
		}
		done <- result{r.ModifyIndex, nil}
	}()
	// The update itself may meet the lost leader: retry it as a driver would.
	for {
		err := s.Update(ctx, rec)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("Update never succeeded: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := <-done
	if r.err != nil || r.idx != rec.ModifyIndex {
		t.Fatalf("Watch across a leader loss: index %d, %v (want %d)", r.idx, r.err, rec.ModifyIndex)
	}
}
