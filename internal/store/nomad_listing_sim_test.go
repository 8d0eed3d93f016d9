package store_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The lister answers at once from index 0, then blocks until a record or a lease changes,
// and answers an unchanged listing when its wait ends.
func TestNomadRestartListerBlocksUntilAChange(t *testing.T) {
	cl, s := startNomadStore(t, store.NomadOptions{Logger: quiet})
	lister := store.NewNomadRestartLister(cl, "")
	ctx := testContext(t, 30*time.Second)

	empty, err := lister.List(ctx, "*", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.Restarts) != 0 || empty.Index == 0 {
		t.Fatalf("empty listing = %+v, want no restarts and an index", empty)
	}

	rec := createRecord(t, ctx, s, "default", "web", 1)
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
	lister := store.NewNomadRestartLister(cl, "/nomad-restart/")
	ctx := testContext(t, 30*time.Second)

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
