package nomadstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestNomadSuite(t *testing.T) {
	runNomadSuite(t, nomadstore.Options{})
}

// A lease that Nomad no longer holds for its driver (here another client released the
// lock; in life its TTL ran out during a partition) is lost, Lost says so at the next
// renewal, and another driver takes the lease.
func TestNomadLeaseLostWhenTakenAway(t *testing.T) {
	cl, s := startNomadStore(t, nomadstore.Options{RenewEvery: 20 * time.Millisecond, Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	l := storetest.MustLease(t, ctx, s, rec, "driver")
	releaseUnder(t, ctx, cl, "nomad-restart/web/"+rec.ID+"/lease", l)
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
	s := restartsOn(simtest.Client(t, c), nomadstore.Options{RenewEvery: 20 * time.Millisecond, Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
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
	_, cnt, s := startCountedStore(t, nomadstore.Options{RenewEvery: 10 * time.Millisecond})
	ctx := storetest.Context(t, 30*time.Second)
	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
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
	c := startWithACLs(t)
	ctx := context.Background()

	reader := simtest.Token(t, c, "reader", `namespace "default" { policy = "read" }`)
	writer := simtest.Token(t, c, "restarter", `
namespace "default" {
  policy = "read"
  variables {
    path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] }
  }
}`)

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
		err := nomadstore.Probe(ctx, varsOn(simtest.ClientAs(t, c, p.token)), "default", "web")
		if (err == nil) != p.wantOK {
			t.Errorf("Probe with the %s token: %v, want ok=%v", p.name, err, p.wantOK)
		}
		if !p.wantOK {
			var perm *store.PermissionError
			if !errors.As(err, &perm) || perm.Namespace != "default" {
				t.Errorf("Probe with the %s token: got %v, want a PermissionError", p.name, err)
			}
		}
	}

	// The reader cannot create a record, and is told what to grant.
	rs := restartsAs(t, c, reader)
	err := rs.Create(ctx, storetest.NewRecord("default", "web", 1))
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
	ws := restartsAs(t, c, writer)
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
	if err := nomadstore.Probe(context.Background(), varsOn(simtest.Client(t, c)), "default", "web"); err != nil {
		t.Fatalf("Probe with ACLs disabled: %v", err)
	}
}

// Watch is a blocking query: while nothing changes it holds one request open instead of
// polling.
func TestNomadWatchBlocks(t *testing.T) {
	_, cnt, s := startCountedStore(t, nomadstore.Options{})
	rec := storetest.NewRecord("default", "web", 1)
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	before := cnt.count("GET")
	ctx := storetest.Context(t, 300*time.Millisecond)
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
	cl, s := startNomadStore(t, nomadstore.Options{})
	ctx := context.Background()
	rec := storetest.CreateRecord(t, ctx, s, "default", "big", 3000)
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
	got, err := restartsOn(cl, nomadstore.Options{}).Get(ctx, "default", rec.ID)
	if err != nil || len(got.Allocs) != 3000 || got.Allocs[2000].State != "done" {
		t.Fatalf("record after clean-up: %v", err)
	}
}

// A job marker left naming a restart that does not exist (its creator died between the
// two writes, or the record was deleted by hand) does not block the job.
func TestNomadStaleMarkerIsFree(t *testing.T) {
	cl := simtest.Client(t, simtest.Start(t, nomadsim.Options{}))
	marker := &api.Variable{Path: "nomad-restart/web/active", Items: map[string]string{"restart": "00000000-0000-4000-8000-000000000000"}}
	if _, _, err := cl.Variables().Create(marker, nil); err != nil {
		t.Fatal(err)
	}
	s := restartsOn(cl, nomadstore.Options{})
	storetest.CheckStaleMarkerIsFree(t, s)
}

// On a cluster that fails some variable requests (5xx and dropped connections), a big
// record still round-trips, updates and leases work: passing failures are retried and no
// write is lost or doubled.
func TestNomadUnderFaults(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{Seed: 7})
	c.SetFault(nomadsim.Fault{Path: "/v1/var", ErrorRate: 0.05, Status: 500, Body: "rpc error: No cluster leader"})
	c.SetFault(nomadsim.Fault{Path: "/v1/var", ErrorRate: 0.02, Drop: true})
	ctx := storetest.Context(t, 60*time.Second)
	s := restartsOn(simtest.Client(t, c), nomadstore.Options{Logger: quiet})
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
	got, err := restartsOn(simtest.Client(t, c), nomadstore.Options{}).Get(ctx, "default", rec.ID)
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
			h := restartsOn(simtest.Client(t, c), nomadstore.Options{})
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
	// At 10, the leader's 5 simulated seconds away last 500 ms of the watch's real time.
	c := simtest.Start(t, nomadsim.Options{TimeScale: 10})
	s := restartsOn(simtest.Client(t, c), nomadstore.Options{Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	c.LoseLeader(5 * time.Second) // 500 ms of real time
	done := storetest.WatchInBackground(ctx, s, "default", rec.ID, rec.ModifyIndex)
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
	if w := <-done; w.Err != nil || w.Rec.ModifyIndex != rec.ModifyIndex {
		t.Fatalf("Watch across a leader loss: %+v, %v (want index %d)", w.Rec, w.Err, rec.ModifyIndex)
	}
}

// TestNomadRetention: an ended restart's lease variable goes when its driver releases it,
// and creating a restart prunes the job's ended ones beyond Keep, oldest first, leaving
// other jobs' alone.
func TestNomadRetention(t *testing.T) {
	cl, s := startNomadStore(t, nomadstore.Options{Keep: 2})
	ctx := storetest.Context(t, 30*time.Second)

	end := func(rec *restart.Record) {
		t.Helper()
		l := storetest.MustLease(t, ctx, s, rec, "driver")
		rec.Status = restart.StatusSucceeded
		if err := s.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other := storetest.CreateRecord(t, ctx, s, "default", "api", 1)
	end(other)
	var ids []string
	for i := range 4 {
		rec := storetest.NewRecord("default", "web", 1)
		rec.CreateTime = time.Now().Add(time.Duration(i) * time.Second)
		if err := s.Create(ctx, rec); err != nil {
			t.Fatalf("create #%d: %v", i, err)
		}
		ids = append(ids, rec.ID)
		end(rec)
	}
	// The 4th create pruned the 1st (2 ended were kept: 2nd, 3rd); the 4th ended after.
	recs, err := s.List(ctx, store.Filter{JobID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		got[r.ID] = true
	}
	if got[ids[0]] || !got[ids[1]] || !got[ids[2]] || !got[ids[3]] || len(recs) != 3 {
		t.Errorf("kept %d records %v; want the newest 3 of %v", len(recs), got, ids)
	}
	if _, err := s.Get(ctx, "default", other.ID); err != nil {
		t.Errorf("another job's ended restart was pruned: %v", err)
	}
	vars, _, err := cl.Variables().PrefixList("", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		if strings.HasSuffix(v.Path, "/lease") {
			t.Errorf("lease variable %s left after its restart ended", v.Path)
		}
		if strings.Contains(v.Path, ids[0]) {
			t.Errorf("variable %s of a pruned restart left", v.Path)
		}
	}
}

// An update that changes one range of a big record is one write, the head's, which carries
// the changed chunk; carried chunks are moved out to variables of their own once they would
// pass their bound, and a reader that never saw the record reads it whole at every step.
func TestNomadHeadCarriesChangedChunks(t *testing.T) {
	cl, cnt, s := startCountedStore(t, nomadstore.Options{})
	ctx := storetest.Context(t, time.Minute)
	rec := storetest.CreateRecord(t, ctx, s, "default", "big", 3000)
	head := "nomad-restart/big/" + rec.ID
	oneWrite, movedOut := 0, 0
	for i := range 20 {
		// Like a driver's batches: each update changes the next range of allocations.
		for j := range 100 {
			rec.Allocs[i*100+j].State = "done"
		}
		puts := cnt.count("PUT")
		if err := s.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
		switch cnt.count("PUT") - puts {
		case 1:
			oneWrite++
		default:
			movedOut++
		}
		if size := variableSize(t, cl, head); size > 65536 {
			t.Fatalf("update %d: head of %d bytes, over Nomad's limit", i, size)
		}
		got, err := restartsOn(cl, nomadstore.Options{}).Get(ctx, "default", rec.ID)
		if err != nil {
			t.Fatalf("update %d: a fresh reader: %v", i, err)
		}
		for k := range rec.Allocs {
			if got.Allocs[k].State != rec.Allocs[k].State {
				t.Fatalf("update %d: allocation %d read as %q, want %q", i, k, got.Allocs[k].State, rec.Allocs[k].State)
			}
		}
	}
	t.Logf("%d updates in one write, %d moved chunks out", oneWrite, movedOut)
	if oneWrite < 10 || movedOut == 0 {
		t.Fatalf("%d updates were one write, %d moved chunks out: want most in one write, and some moving out", oneWrite, movedOut)
	}
	// An unhurried write leaves the head carrying nothing.
	rec.Allocs[2999].State = "done"
	if err := s.Update(store.Unhurried(ctx), rec); err != nil {
		t.Fatal(err)
	}
	v, _, err := cl.Variables().Read(head, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range v.Items {
		if strings.HasPrefix(k, "c.") {
			t.Fatalf("after an unhurried write the head still carries %s", k)
		}
	}
	if got, err := restartsOn(cl, nomadstore.Options{}).Get(ctx, "default", rec.ID); err != nil || got.Allocs[2999].State != "done" {
		t.Fatalf("after an unhurried write: %v", err)
	}
	// Nothing leaks: the variables under the record are exactly the chunks the head names
	// and does not carry, once the replaced ones are deleted (off the writer's path).
	simtest.WaitFor(t, ctx, "replaced chunks to be deleted", func() bool {
		listed, named := chunkVariables(t, cl, head)
		return listed == named
	})
}

// chunkVariables counts the chunk variables under a record's head, and the chunks the head
// names that are variables (not those it carries).
func chunkVariables(t *testing.T, cl *api.Client, head string) (listed, named int) {
	t.Helper()
	metas, _, err := cl.Variables().PrefixList(head+"/c/", nil)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := cl.Variables().Read(head, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(v.Items["chunks"]) {
		if _, carried := v.Items["c."+name]; !carried {
			named++
		}
	}
	return len(metas), named
}

// The lister answers at once from index 0, then blocks until a record or a lease changes,
// and answers an unchanged listing when its wait ends.
func TestNomadRestartListerBlocksUntilAChange(t *testing.T) {
	cl, s := startNomadStore(t, nomadstore.Options{Logger: quiet})
	lister := nomadstore.NewLister(varsOn(cl), "")
	ctx := storetest.Context(t, 30*time.Second)

	empty, err := lister.List(ctx, "*", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.Restarts) != 0 || empty.Index == 0 {
		t.Fatalf("empty listing = %+v, want no restarts and an index", empty)
	}

	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	created, err := lister.List(ctx, "*", empty.Index, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.ListedRestart{{Namespace: "default", ID: rec.ID, JobSegment: "web", HeadIndex: rec.ModifyIndex}}
	if !reflect.DeepEqual(created.Restarts, want) || created.Index <= empty.Index {
		t.Fatalf("listing after Create = %+v (index %d after %d), want %+v", created.Restarts, created.Index, empty.Index, want)
	}

	type answer struct {
		l   store.RestartListing
		err error
	}
	done := make(chan answer, 1)
	go func() {
		l, err := lister.List(ctx, "*", created.Index, time.Minute)
		done <- answer{l, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("List answered before anything changed: %+v, %v", a.l, a.err)
	case <-time.After(100 * time.Millisecond):
	}
	lease := storetest.MustLease(t, ctx, s, rec, "driver")
	defer func() { _ = lease.Release(context.Background()) }()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.l.Restarts) != 1 || a.l.Restarts[0].LeaseIndex == 0 || a.l.Restarts[0].HeadIndex != rec.ModifyIndex || a.l.Index <= created.Index {
		t.Fatalf("listing after the lease was taken = %+v (index %d after %d), want the lease's index", a.l.Restarts, a.l.Index, created.Index)
	}

	start := time.Now()
	idle, err := lister.List(ctx, "*", a.l.Index, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 50*time.Millisecond || idle.Index != a.l.Index || !reflect.DeepEqual(idle.Restarts, a.l.Restarts) {
		t.Fatalf("idle listing = %+v (index %d) after %v, want the same listing after its wait", idle.Restarts, idle.Index, time.Since(start))
	}
}

// A failed listing is tried once (the watch loop calling List paces its own tries), and a
// refusal is the store's PermissionError naming the prefix to grant.
func TestNomadRestartListerTriesOnce(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	cl, cnt := countingClient(t, c)
	lister := nomadstore.NewLister(varsOn(cl), "/nomad-restart/")
	ctx := storetest.Context(t, 30*time.Second)

	remove := c.SetFault(nomadsim.Fault{Method: http.MethodGet, Path: "/v1/vars", Status: http.StatusInternalServerError})
	if _, err := lister.List(ctx, "*", 0, time.Minute); err == nil {
		t.Fatal("List answered while Nomad failed every listing")
	}
	if n := cnt.count(http.MethodGet); n != 1 {
		t.Errorf("a failed listing sent %d requests, want 1", n)
	}
	remove()

	defer c.SetFault(nomadsim.Fault{Method: http.MethodGet, Path: "/v1/vars", Status: http.StatusForbidden, Body: "Permission denied"})()
	_, err := lister.List(ctx, "*", 0, time.Minute)
	var perm *store.PermissionError
	if !errors.As(err, &perm) || perm.Capability != "list" || perm.Prefix != "nomad-restart" || perm.Path != "nomad-restart/" {
		t.Fatalf("List when Nomad refuses it: %v; want a PermissionError for list on nomad-restart/", err)
	}
}

// BenchmarkNomadUpdate reports the request bytes sent to Nomad per Update (bytes/update)
// and the requests per Update (reqs/update): chunks of a big record are rewritten only
// where they changed.
func BenchmarkNomadUpdate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("allocs=%d", n), func(b *testing.B) {
			c := simtest.Start(b, nomadsim.Options{})
			cl, cnt := countingClient(b, c)
			s := restartsOn(cl, nomadstore.Options{})
			reqs := func() int { return cnt.count("PUT") + cnt.count("DELETE") + cnt.count("GET") }
			var reqs0 int
			storetest.BenchUpdate(b, s, n, func() int64 {
				if reqs0 == 0 {
					reqs0 = reqs() // the first call comes right after the Create
				}
				return cnt.bytesSent()
			})
			b.ReportMetric(float64(reqs()-reqs0)/float64(b.N), "reqs/update")
		})
	}
}

// counter is an http.RoundTripper that counts the requests an api client sends and the
// bytes of their bodies, by method and whether the URL holds a marker such as "lock-renew".
type counter struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs map[string]int
	sent int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	key := r.Method
	if strings.Contains(r.URL.RawQuery, "lock-renew") {
		key += " lock-renew"
	}
	c.reqs[key]++
	if r.ContentLength > 0 {
		c.sent += r.ContentLength
	}
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reqs[key]
}

func (c *counter) bytesSent() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// countingClient is an api client on the cluster whose traffic is counted.
func countingClient(t testing.TB, c *nomadsim.Cluster) (*api.Client, *counter) {
	t.Helper()
	cnt := &counter{next: http.DefaultTransport, reqs: map[string]int{}}
	return simtest.ClientVia(t, c, "", cnt), cnt
}

// startCountedStore is startNomadStore with a client whose requests are counted.
func startCountedStore(t testing.TB, opts nomadstore.Options) (*api.Client, *counter, *nomadstore.Restarts) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{})
	cl, cnt := countingClient(t, c)
	return cl, cnt, restartsOn(cl, opts)
}
