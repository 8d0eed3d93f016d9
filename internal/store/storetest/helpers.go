package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// The helpers every store's own tests share, beside the suite.

// Context is a context that ends after d, or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// CreateRecord creates NewRecord(ns, job, allocs) in s, failing the test when
// it cannot.
func CreateRecord(t testing.TB, ctx context.Context, s store.Store, ns, job string, allocs int) *restart.Record {
	t.Helper()
	rec := NewRecord(ns, job, allocs)
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// CheckStaleMarkerIsFree checks, on a store whose job "web" has a marker naming a restart
// that does not exist, that a restart of the job can be created and takes the marker over.
func CheckStaleMarkerIsFree(t *testing.T, s store.Store) {
	t.Helper()
	rec := NewRecord("default", "web", 1)
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatalf("Create with a stale marker: %v", err)
	}
	var busy *store.JobBusyError
	if err := s.Create(context.Background(), NewRecord("default", "web", 1)); !errors.As(err, &busy) || busy.RestartID != rec.ID {
		t.Fatalf("the marker was not taken over: %v", err)
	}
}

// BenchUpdate measures Update of a record with n allocations, each update changing one
// allocation and adding an event, as a driver does. written reports the bytes written so
// far (a running total).
func BenchUpdate(b *testing.B, s store.Store, n int, written func() int64) {
	ctx := context.Background()
	rec := NewRecord("default", fmt.Sprintf("bench-%d", n), n)
	if err := s.Create(ctx, rec); err != nil {
		b.Fatal(err)
	}
	base := written()
	last := base
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := &rec.Allocs[i%n]
		a.State = restart.AllocDone
		a.Attempts++
		rec.Events = append(rec.Events, restart.Event{Seq: uint64(len(rec.Events) + 1), Type: restart.EventAllocDone, AllocID: a.ID, Message: "allocation restarted"})
		if len(rec.Events) > restart.MaxEvents {
			rec.Events = rec.Events[1:]
		}
		if err := s.Update(ctx, rec); err != nil {
			b.Fatal(err)
		}
		last = written()
	}
	b.StopTimer()
	b.ReportMetric(float64(last-base)/float64(b.N), "bytes/update")
}

// Watched is the answer of a watch made in the background: the record, WatchControl's next
// token (0 for the other watches) and the error.
type Watched[R any] struct {
	Rec   R
	Token uint64
	Err   error
}

// InBackground calls watch in a goroutine, so that the test can write while it waits; its
// answer waits on the channel until the test reads it.
func InBackground[R any](watch func() (R, uint64, error)) <-chan Watched[R] {
	out := make(chan Watched[R], 1)
	go func() {
		rec, token, err := watch()
		out <- Watched[R]{rec, token, err}
	}()
	return out
}

// WatchControlInBackground is s.WatchControl, InBackground.
func WatchControlInBackground[R any](ctx context.Context, s store.Records[R], namespace, id string, token uint64) <-chan Watched[R] {
	return InBackground(func() (R, uint64, error) { return s.WatchControl(ctx, namespace, id, token) })
}

// WatchInBackground is s.Watch, InBackground.
func WatchInBackground[R any](ctx context.Context, s store.Records[R], namespace, id string, afterIndex uint64) <-chan Watched[R] {
	return InBackground(func() (R, uint64, error) {
		rec, err := s.Watch(ctx, namespace, id, afterIndex)
		return rec, 0, err
	})
}
