package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// testContext is a context that ends after d, or with the test.
func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createRecord creates storetest.NewRecord(ns, job, allocs) in s, failing the test when
// it cannot.
func createRecord(t testing.TB, ctx context.Context, s store.Store, ns, job string, allocs int) *restart.Record {
	t.Helper()
	rec := storetest.NewRecord(ns, job, allocs)
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// newLocalStore opens a local store in a new temporary directory, which it returns too.
func newLocalStore(t testing.TB) (string, *store.Local) {
	t.Helper()
	dir := t.TempDir()
	s, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, s
}

// checkStaleMarkerIsFree checks, on a store whose job "web" has a marker naming a restart
// that does not exist, that a restart of the job can be created and takes the marker over.
func checkStaleMarkerIsFree(t *testing.T, s store.Store) {
	t.Helper()
	rec := storetest.NewRecord("default", "web", 1)
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatalf("Create with a stale marker: %v", err)
	}
	var busy *store.JobBusyError
	if err := s.Create(context.Background(), storetest.NewRecord("default", "web", 1)); !errors.As(err, &busy) || busy.RestartID != rec.ID {
		t.Fatalf("the marker was not taken over: %v", err)
	}
}
