package nomadstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// A CreateLeased refused (the job busy) leaves no variable of the refused restart behind:
// neither its head nor its lease.
func TestNomadCreateLeasedRefusedLeavesNothing(t *testing.T) {
	cl, s := startNomadStore(t, nomadstore.Options{Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	first := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	second := storetest.NewRecord("default", "web", 1)
	var busy *store.JobBusyError
	if _, err := s.CreateLeased(ctx, second, "driver"); !errors.As(err, &busy) || busy.RestartID != first.ID {
		t.Fatalf("CreateLeased of a busy job: %v, want a JobBusyError naming %s", err, first.ID)
	}
	if left := variablesUnder(t, cl, "nomad-restart/web/"+second.ID); len(left) != 0 {
		t.Fatalf("the refused restart left variables: %v", left)
	}
}

// A lease whose creator was killed before it wrote the record (its head) is not a restart
// to anyone listing them; while it is locked it stays, and once Nomad freed it (its TTL
// ran out) the next creation of a restart of the job deletes it. A lease beside its record
// stays, free or not: its restart is still to be adopted.
func TestNomadLeaseWithoutRecordIsSwept(t *testing.T) {
	cl, s := startNomadStore(t, nomadstore.Options{Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	lister := nomadstore.NewLister(varsOn(cl), "")

	// A restart whose driver let go: its lease variable is left, unlocked, beside it.
	kept := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	storetest.TakeFreeLease(t, ctx, s, kept, "driver", "of the kept restart")
	kept.Status = restart.StatusCanceled
	if err := s.Update(ctx, kept); err != nil {
		t.Fatal(err)
	}
	keptLease := "nomad-restart/web/" + kept.ID + "/lease"

	orphan := "nomad-restart/web/" + uuid.NewString() + "/lease"
	v, _, err := cl.Variables().AcquireLock(&api.Variable{Path: orphan, Items: map[string]string{"holder": "killed"},
		Lock: &api.VariableLock{TTL: "10s", LockDelay: "1s"}}, nil)
	if err != nil || v.LockID() == "" {
		t.Fatalf("locking the orphan lease: %v", err)
	}
	listing, err := lister.List(ctx, "*", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(listing.Restarts) != 1 || listing.Restarts[0].ID != kept.ID {
		t.Fatalf("listed %+v, want only restart %s", listing.Restarts, kept.ID)
	}

	createdEnded := func() {
		t.Helper()
		rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
		rec.Status = restart.StatusSucceeded
		if err := s.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	createdEnded()
	if !exists(t, cl, orphan) {
		t.Fatal("a creation deleted a lease still locked (its creator may be at work)")
	}
	if _, _, err := cl.Variables().ReleaseLock(&api.Variable{Path: orphan, Lock: &api.VariableLock{ID: v.LockID()}}, nil); err != nil {
		t.Fatal(err)
	}
	createdEnded()
	if exists(t, cl, orphan) {
		t.Fatal("the lease left without its record is still there after the job's next creation")
	}
	if !exists(t, cl, keptLease) {
		t.Fatal("the sweep deleted the lease of an existing restart")
	}
}

// A fleet created leased is its creator's from its first write; a second creation of it
// is refused and leaves the lease alone; a creation refused while the lease was free
// (the fleet exists) keeps no lease; a lease left without its fleet is swept by the
// namespace's next fleet.
func TestNomadFleetCreateLeased(t *testing.T) {
	cl, s, _ := startFleets(t, nomadstore.Options{Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	f := newFleet("default", 2)
	l, err := s.CreateLeased(ctx, f, "creator")
	if err != nil {
		t.Fatalf("CreateLeased: %v", err)
	}
	if f.CreateIndex == 0 {
		t.Fatal("CreateLeased did not set the fleet's indexes")
	}
	if _, err := s.AcquireLease(ctx, "default", f.ID, "agent"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireLease of a fleet created leased: %v, want ErrLeaseHeld", err)
	}
	if h, err := s.LeaseHolder(ctx, "default", f.ID); err != nil || h != "creator" {
		t.Fatalf("LeaseHolder: %q, %v; want creator", h, err)
	}
	dup := newFleet("default", 1)
	dup.ID = f.ID
	if _, err := s.CreateLeased(ctx, dup, "other"); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second CreateLeased of the fleet: %v, want ErrExists", err)
	}
	if h, _ := s.LeaseHolder(ctx, "default", f.ID); h != "creator" {
		t.Fatalf("the refused second creation changed the lease's holder to %q", h)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	dup = newFleet("default", 1)
	dup.ID = f.ID
	if _, err := s.CreateLeased(ctx, dup, "other"); !errors.Is(err, store.ErrExists) {
		t.Fatalf("CreateLeased of an existing fleet: %v, want ErrExists", err)
	}
	leasePath := "nomad-restart/" + nomadstore.FleetsDir + "/" + f.ID + "/lease"
	if exists(t, cl, leasePath) {
		t.Fatal("a refused creation kept the fleet's lease")
	}

	orphan := "nomad-restart/" + nomadstore.FleetsDir + "/" + uuid.NewString() + "/lease"
	v, _, err := cl.Variables().AcquireLock(&api.Variable{Path: orphan, Items: map[string]string{"holder": "killed"},
		Lock: &api.VariableLock{TTL: "10s", LockDelay: "1s"}}, nil)
	if err != nil || v.LockID() == "" {
		t.Fatalf("locking the orphan lease: %v", err)
	}
	if _, _, err := cl.Variables().ReleaseLock(&api.Variable{Path: orphan, Lock: &api.VariableLock{ID: v.LockID()}}, nil); err != nil {
		t.Fatal(err)
	}
	mustCreateFleet(t, ctx, s, newFleet("default", 1))
	if exists(t, cl, orphan) {
		t.Fatal("the lease left without its fleet is still there after the next fleet's creation")
	}
}
