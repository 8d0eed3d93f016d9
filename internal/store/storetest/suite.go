// Package storetest is the one behaviour suite every store.Store implementation must pass.
// Each store's tests call RunSuite with a way to open handles on a fresh backend.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Backend is one fresh, empty store backend (a directory, a cluster).
type Backend struct {
	// Open returns a new handle on the backend, as another process would open it: it
	// shares the stored records but no in-memory state with other handles.
	Open func(t *testing.T) store.Store
	// BellOnly says WatchControl is woken by steering (Ring) alone, never by the driver's
	// own writes (the Nomad store); otherwise any write may wake it (the local store).
	BellOnly bool
}

// RunSuite runs every case against fresh backends made by newBackend.
func RunSuite(t *testing.T, newBackend func(t *testing.T) Backend) {
	cases := []struct {
		name string
		run  func(t *testing.T, b Backend)
	}{
		{"CreateGet", testCreateGet},
		{"FindPrefix", testFindPrefix},
		{"ListOrderAndFilters", testList},
		{"UpdateConflict", testUpdateConflict},
		{"MutateContention", testMutateContention},
		{"JobBusy", testJobBusy},
		{"ConcurrentCreatesOneWins", testConcurrentCreates},
		{"JobFreedAfterTerminal", testJobFreed},
		{"CreateSameIDFailsWithErrExists", testCreateExists},
		{"WatchWakesOnUpdate", testWatch},
		{"WatchHonoursContext", testWatchContext},
		{"WatchControlWakesOnSteering", testWatchControl},
		{"LeaseExclusive", testLease},
		{"LeaseFreeProbe", testLeaseFree},
		{"CreateLeasedHoldsTheLease", testCreateLeased},
		{"CreateLeasedRefusedKeepsNoLease", testCreateLeasedRefused},
		{"CreateLeasedNeverSeenUnleased", testCreateLeasedRace},
		{"ConcurrentCreateLeasedOneWins", testConcurrentCreateLeased},
		{"LargeRecordRoundTrip", testLargeRecord},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newBackend(t))
		})
	}
}

// NewRecord builds a pending record of job in namespace with n planned allocations.
func NewRecord(namespace, job string, n int) *restart.Record {
	now := time.Now().UTC()
	rec := &restart.Record{
		ID:        uuid.NewString(),
		Namespace: namespace,
		Region:    "global",
		JobID:     job,
		JobType:   "service",
		Spec: restart.Spec{
			BatchSizes:      []restart.BatchSize{{N: 1}},
			OnError:         restart.OnErrorAsk,
			Health:          restart.HealthRunning,
			HealthyDeadline: restart.DefaultHealthyDeadline,
		},
		Status:     restart.StatusPending,
		Batches:    n,
		CreateTime: now,
		Control:    restart.Control{Intent: restart.IntentRun},
		Events:     []restart.Event{{Seq: 1, Time: now, Type: restart.EventCreated, Message: "restart created"}},
		// A config-change rollout's trigger, so that every store keeps one.
		Triggers: []restart.Trigger{{Source: "nomad:nomad/jobs/" + job + "/config", OldIndex: 7, NewIndex: 9, ChangedAt: now}},
	}
	rec.Spec.StartedBefore = now
	for i := range n {
		rec.Allocs = append(rec.Allocs, restart.AllocProgress{
			ID:     uuid.NewString(),
			Name:   fmt.Sprintf("%s.web[%d]", job, i),
			Group:  "web",
			NodeID: uuid.NewString(),
			Batch:  i + 1,
			State:  restart.AllocPending,
			Tasks:  []string{"server"},
		})
	}
	return rec
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sameContent compares two records by their JSON, which ignores time zones' pointers.
func sameContent(t *testing.T, want, got *restart.Record) {
	t.Helper()
	w, _ := json.Marshal(want)
	g, _ := json.Marshal(got)
	if string(w) != string(g) {
		if len(w) > 600 {
			w, g = w[:600], g[:600]
		}
		t.Fatalf("records differ:\nwant %s\n got %s", w, g)
	}
}

// MustCreate creates rec in s, failing the test when it cannot.
func MustCreate(t testing.TB, s store.Store, rec *restart.Record) {
	t.Helper()
	if err := s.Create(ctxFor(t), rec); err != nil {
		t.Fatalf("Create(%s): %v", rec.JobID, err)
	}
}

// TakeFreeLease acquires rec's lease for holder and releases it at once, failing the test
// when the lease is not free; when says at what point, for the failure message.
func TakeFreeLease(t testing.TB, ctx context.Context, s store.Store, rec *restart.Record, holder, when string) {
	t.Helper()
	l, err := s.AcquireLease(ctx, rec.Namespace, rec.ID, holder)
	if err != nil {
		t.Fatalf("AcquireLease %s: %v", when, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// MustLease acquires rec's lease in s for holder, failing the test when it cannot.
func MustLease(t testing.TB, ctx context.Context, s store.Store, rec *restart.Record, holder string) store.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctx, rec.Namespace, rec.ID, holder)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	return l
}

func testCreateGet(t *testing.T, b Backend) {
	s := b.Open(t)
	ctx := ctxFor(t)
	rec := NewRecord("default", "web", 3)
	rec.ID = ""
	MustCreate(t, s, rec)
	if rec.ID == "" || rec.CreateIndex == 0 || rec.ModifyIndex != rec.CreateIndex || rec.ModifyTime.IsZero() {
		t.Fatalf("Create did not set ID and indexes: ID=%q CreateIndex=%d ModifyIndex=%d ModifyTime=%v",
			rec.ID, rec.CreateIndex, rec.ModifyIndex, rec.ModifyTime)
	}
	// Another handle (another process) sees the same record.
	got, err := b.Open(t).Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameContent(t, rec, got)
	if _, err := s.Get(ctx, "default", uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of an unknown ID: got %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "other", rec.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get in the wrong namespace: got %v, want ErrNotFound", err)
	}
	if k := s.Kind(); k != "local" && k != "nomad" {
		t.Fatalf("Kind() = %q", k)
	}
}

func withID(rec *restart.Record, prefix string) *restart.Record {
	rec.ID = prefix + rec.ID[len(prefix):]
	return rec
}

func testFindPrefix(t *testing.T, b Backend) {
	s := b.Open(t)
	ctx := ctxFor(t)
	a := withID(NewRecord("default", "api", 1), "aaaa1111")
	a2 := withID(NewRecord("default", "db", 1), "aaaa2222")
	c := withID(NewRecord("prod", "api", 1), "cccc3333")
	for _, r := range []*restart.Record{a, a2, c} {
		MustCreate(t, s, r)
	}
	s2 := b.Open(t)
	tests := []struct {
		ns, prefix string
		want       string // ID, or "" for an error
		wantErr    error
		ambiguous  bool
	}{
		{ns: "", prefix: "aaaa1", want: a.ID},
		{ns: "*", prefix: a2.ID, want: a2.ID},
		{ns: "default", prefix: "aaaa2", want: a2.ID},
		{ns: "", prefix: "cccc", want: c.ID},
		{ns: "prod", prefix: "cccc3333", want: c.ID},
		{ns: "default", prefix: "cccc", wantErr: store.ErrNotFound},
		{ns: "", prefix: "dddd", wantErr: store.ErrNotFound},
		{ns: "", prefix: "aaaa", ambiguous: true},
	}
	for _, tc := range tests {
		got, err := s2.Find(ctx, tc.ns, tc.prefix)
		switch {
		case tc.ambiguous:
			var amb *store.AmbiguousIDError
			if !errors.As(err, &amb) || len(amb.Matches) != 2 {
				t.Errorf("Find(%q, %q): got %v, want an AmbiguousIDError with 2 matches", tc.ns, tc.prefix, err)
			}
		case tc.wantErr != nil:
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Find(%q, %q): got %v, want %v", tc.ns, tc.prefix, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("Find(%q, %q): %v", tc.ns, tc.prefix, err)
		case got.ID != tc.want:
			t.Errorf("Find(%q, %q) = %s, want %s", tc.ns, tc.prefix, got.ID, tc.want)
		}
	}
	// A record found by prefix can be read back by its namespace and full ID.
	got, err := s2.Get(ctx, "prod", c.ID)
	if err != nil || got.JobID != "api" {
		t.Fatalf("Get after Find: %v, %+v", err, got)
	}
}

func testList(t *testing.T, b Backend) {
	s := b.Open(t)
	ctx := ctxFor(t)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mk := func(ns, job string, age int, status restart.Status) *restart.Record {
		r := NewRecord(ns, job, 1)
		r.CreateTime = base.Add(-time.Duration(age) * time.Minute)
		r.Status = status
		return r
	}
	old := mk("default", "api", 30, restart.StatusSucceeded)
	mid := mk("prod", "api", 20, restart.StatusRunning)
	newest := mk("default", "db", 10, restart.StatusPaused)
	failed := mk("default", "cache", 15, restart.StatusFailed)
	// Created out of time order: List sorts by CreateTime, not by creation index.
	for _, r := range []*restart.Record{mid, old, newest, failed} {
		MustCreate(t, s, r)
	}
	ids := func(recs []*restart.Record) []string {
		out := make([]string, len(recs))
		for i, r := range recs {
			out[i] = r.ID
		}
		return out
	}
	tests := []struct {
		name string
		f    store.Filter
		want []string
	}{
		{"all", store.Filter{}, []string{newest.ID, failed.ID, mid.ID, old.ID}},
		{"all star", store.Filter{Namespace: "*"}, []string{newest.ID, failed.ID, mid.ID, old.ID}},
		{"namespace", store.Filter{Namespace: "default"}, []string{newest.ID, failed.ID, old.ID}},
		{"job", store.Filter{JobID: "api"}, []string{mid.ID, old.ID}},
		{"active", store.Filter{Active: true}, []string{newest.ID, mid.ID}},
		{"active job in namespace", store.Filter{Namespace: "prod", JobID: "api", Active: true}, []string{mid.ID}},
		{"none", store.Filter{JobID: "nosuch"}, []string{}},
	}
	s2 := b.Open(t)
	for _, tc := range tests {
		got, err := s2.List(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: List: %v", tc.name, err)
		}
		if g := ids(got); fmt.Sprint(g) != fmt.Sprint(tc.want) {
			t.Errorf("%s: List = %v, want %v", tc.name, g, tc.want)
		}
	}
}

func testUpdateConflict(t *testing.T, b Backend) {
	s1, s2 := b.Open(t), b.Open(t)
	ctx := ctxFor(t)
	rec := NewRecord("default", "web", 2)
	MustCreate(t, s1, rec)
	r1, err := s1.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s2.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	r1.Status = restart.StatusRunning
	r1.Allocs[0].State = restart.AllocRestarting
	before := r1.ModifyIndex
	if err := s1.Update(ctx, r1); err != nil {
		t.Fatalf("first Update: %v", err)
	}
	if r1.ModifyIndex <= before {
		t.Fatalf("Update did not advance ModifyIndex: %d -> %d", before, r1.ModifyIndex)
	}
	stale := r2.ModifyIndex
	r2.Control.Intent = restart.IntentCancel
	if err := s2.Update(ctx, r2); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale Update: got %v, want ErrConflict", err)
	}
	if r2.ModifyIndex != stale {
		t.Fatalf("a failed Update changed the record's ModifyIndex: %d -> %d", stale, r2.ModifyIndex)
	}
	got, err := s2.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameContent(t, r1, got)
	if got.Control.Intent != restart.IntentRun {
		t.Fatalf("the stale write leaked: intent %q", got.Control.Intent)
	}
}

func testMutateContention(t *testing.T, b Backend) {
	ctx := ctxFor(t)
	rec := NewRecord("default", "web", 1)
	MustCreate(t, b.Open(t), rec)
	const workers, each = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		s := b.Open(t) // each worker a separate handle, as separate processes
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := store.Mutate(ctx, s, "default", rec.ID, func(r *restart.Record) error {
					r.CurrentBatch++
					r.Events = append(r.Events, restart.Event{Seq: uint64(len(r.Events) + 1), Type: restart.EventWarning, Message: fmt.Sprintf("worker %d step %d", w, i)})
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Mutate: %v", err)
	}
	got, err := b.Open(t).Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentBatch != workers*each || len(got.Events) != workers*each+1 {
		t.Fatalf("lost updates: CurrentBatch=%d events=%d, want %d and %d", got.CurrentBatch, len(got.Events), workers*each, workers*each+1)
	}
}

func testJobBusy(t *testing.T, b Backend) {
	s := b.Open(t)
	ctx := ctxFor(t)
	first := NewRecord("default", "web", 1)
	MustCreate(t, s, first)
	second := NewRecord("default", "web", 1)
	err := b.Open(t).Create(ctx, second)
	var busy *store.JobBusyError
	if !errors.As(err, &busy) {
		t.Fatalf("second Create: got %v, want a JobBusyError", err)
	}
	if busy.RestartID != first.ID || busy.JobID != "web" {
		t.Fatalf("JobBusyError names %+v, want restart %s of job web", busy, first.ID)
	}
	if _, err := s.Get(ctx, "default", second.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused record was stored: %v", err)
	}
	// The same job ID in another namespace is another job; another job is free.
	MustCreate(t, s, NewRecord("prod", "web", 1))
	MustCreate(t, s, NewRecord("default", "web-2", 1))
}

func testConcurrentCreates(t *testing.T, b Backend) {
	ctx := ctxFor(t)
	const n = 6
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		s := b.Open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.Create(ctx, NewRecord("default", "race", 1))
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		var busy *store.JobBusyError
		switch {
		case err == nil:
			wins++
		case errors.As(err, &busy):
		default:
			t.Errorf("Create: unexpected error %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent Creates for one job succeeded, want exactly 1", wins)
	}
	active, err := b.Open(t).List(ctx, store.Filter{JobID: "race", Active: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 1 {
		t.Fatalf("%d active restarts of job race are stored, want 1", len(active))
	}
}

func testJobFreed(t *testing.T, b Backend) {
	s := b.Open(t)
	ctx := ctxFor(t)
	first := NewRecord("default", "web", 1)
	MustCreate(t, s, first)
	first.Status = restart.StatusRunning
	if err := s.Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	var busy *store.JobBusyError
	if err := s.Create(ctx, NewRecord("default", "web", 1)); !errors.As(err, &busy) {
		t.Fatalf("Create while running: got %v, want JobBusyError", err)
	}
	first.Status = restart.StatusCanceled
	if err := s.Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	next := NewRecord("default", "web", 1)
	if err := b.Open(t).Create(ctx, next); err != nil {
		t.Fatalf("Create after the first restart ended: %v", err)
	}
	if err := s.Create(ctx, NewRecord("default", "web", 1)); !errors.As(err, &busy) || busy.RestartID != next.ID {
		t.Fatalf("third Create: got %v, want JobBusyError naming %s", err, next.ID)
	}
}

func testWatch(t *testing.T, b Backend) {
	// WatchHead runs on a record big enough to be cut into chunks by the Nomad store: it
	// must still see Status and Control without reading them.
	for _, tc := range []struct {
		name   string
		allocs int
		watch  func(s store.Store) func(ctx context.Context, ns, id string, after uint64) (*restart.Record, error)
	}{
		{"Watch", 2, func(s store.Store) func(context.Context, string, string, uint64) (*restart.Record, error) {
			return s.Watch
		}},
		{"WatchHead", 1500, func(s store.Store) func(context.Context, string, string, uint64) (*restart.Record, error) {
			return s.WatchHead
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := b.Open(t)
			ctx := ctxFor(t)
			rec := NewRecord("default", "web-"+tc.name, tc.allocs)
			MustCreate(t, s, rec)
			// Already newer than afterIndex: returns at once.
			got, err := tc.watch(s)(ctx, "default", rec.ID, rec.ModifyIndex-1)
			if err != nil || got.ModifyIndex != rec.ModifyIndex || got.Status != rec.Status {
				t.Fatalf("%s of an older index: %v, %+v", tc.name, err, got)
			}
			type result struct {
				rec *restart.Record
				err error
			}
			done := make(chan result, 1)
			started := make(chan struct{})
			id, after := rec.ID, rec.ModifyIndex // read here: Update below rewrites rec meanwhile
			go func() {
				close(started)
				r, err := tc.watch(b.Open(t))(ctx, "default", id, after)
				done <- result{r, err}
			}()
			<-started
			select {
			case r := <-done:
				t.Fatalf("%s returned before any update: %+v", tc.name, r)
			case <-time.After(50 * time.Millisecond):
			}
			rec.Control.Intent = restart.IntentPause
			rec.Control.By = "tester"
			if err := s.Update(ctx, rec); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("%s: %v", tc.name, r.err)
			}
			if r.rec.ModifyIndex != rec.ModifyIndex || r.rec.Control != rec.Control || r.rec.Status != rec.Status || r.rec.JobID != rec.JobID {
				t.Fatalf("%s returned index %d control %+v status %s, want %d %+v %s", tc.name,
					r.rec.ModifyIndex, r.rec.Control, r.rec.Status, rec.ModifyIndex, rec.Control, rec.Status)
			}
			if tc.name == "Watch" && len(r.rec.Allocs) != tc.allocs {
				t.Fatalf("Watch returned %d allocations, want %d", len(r.rec.Allocs), tc.allocs)
			}
			if _, err := tc.watch(s)(ctx, "default", uuid.NewString(), 0); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s of an unknown restart: got %v, want ErrNotFound", tc.name, err)
			}
		})
	}
}

// The driver's watch of operators' steering: it wakes when an operator's Mutate changes
// Control, with the new Control, and (BellOnly) not on the driver's own writes before it.
func testWatchControl(t *testing.T, b Backend) {
	operator, driver := b.Open(t), b.Open(t)
	ctx := ctxFor(t)
	rec := NewRecord("default", "web", 3)
	MustCreate(t, operator, rec)
	if _, _, err := driver.WatchControl(ctx, "default", uuid.NewString(), 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("WatchControl of an unknown restart: got %v, want ErrNotFound", err)
	}
	_, token, err := driver.WatchControl(ctx, "default", rec.ID, 0)
	if err != nil {
		t.Fatalf("first WatchControl: %v", err)
	}
	own, err := driver.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	// wakes counts the watch's answers; it is read once the watch answered on done.
	wakes := 0
	done := InBackground(func() (*restart.Record, uint64, error) {
		tok := token
		for {
			r, next, err := driver.WatchControl(ctx, "default", rec.ID, tok)
			wakes++
			if err != nil || r.Control.Intent == restart.IntentPause {
				return r, next, err
			}
			tok = next
		}
	})
	// The driver's own progress, three writes.
	for i := range 3 {
		own.Allocs[i].State = restart.AllocDone
		if err := driver.Update(ctx, own); err != nil {
			t.Fatalf("driver's write %d: %v", i, err)
		}
	}
	if _, err := store.Mutate(ctx, operator, "default", rec.ID, func(r *restart.Record) error {
		r.Control = restart.Control{Intent: restart.IntentPause, By: "tester"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var r Watched[*restart.Record]
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("WatchControl did not wake on the operator's pause")
	}
	if r.Err != nil {
		t.Fatalf("WatchControl: %v", r.Err)
	}
	if r.Rec.Control.By != "tester" || r.Rec.ModifyIndex <= own.ModifyIndex {
		t.Fatalf("WatchControl returned control %+v at index %d, want the pause by tester after index %d", r.Rec.Control, r.Rec.ModifyIndex, own.ModifyIndex)
	}
	if b.BellOnly && wakes != 1 {
		t.Fatalf("WatchControl woke %d times, want once: the driver's own writes woke it", wakes)
	}
}

// A record's ID is filed once: a second Create of it fails with ErrExists, from another
// handle, while it runs and after it ended (when its job is free again).
func testCreateExists(t *testing.T, b Backend) {
	s1, s2 := b.Open(t), b.Open(t)
	ctx := ctxFor(t)
	rec := NewRecord("default", "web", 1)
	again := *rec
	MustCreate(t, s1, rec)
	dup := again
	if err := s2.Create(ctx, &dup); !errors.Is(err, store.ErrExists) && !isBusy(err) {
		t.Fatalf("a second Create of a running restart: got %v, want ErrExists or JobBusyError", err)
	}
	rec.Status = restart.StatusSucceeded
	if err := s1.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	dup = again
	if err := s2.Create(ctx, &dup); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second Create of an ended restart: got %v, want ErrExists", err)
	}
	// The job is free for another restart.
	MustCreate(t, s2, NewRecord("default", "web", 1))
}

func isBusy(err error) bool {
	var busy *store.JobBusyError
	return errors.As(err, &busy)
}

func testWatchContext(t *testing.T, b Backend) {
	s := b.Open(t)
	rec := NewRecord("default", "web", 1)
	MustCreate(t, s, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := WatchInBackground(ctx, s, "default", rec.ID, rec.ModifyIndex)
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case w := <-done:
		if !errors.Is(w.Err, context.Canceled) {
			t.Fatalf("Watch after cancel: got %v, want context.Canceled", w.Err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Watch ignored its context")
	}
}

// holdLease opens two handles on one backend and creates a record through the first, which
// then holds its lease as driver-1.
func holdLease(t *testing.T, b Backend) (s1, s2 store.Store, ctx context.Context, rec *restart.Record, l1 store.Lease) {
	s1, s2 = b.Open(t), b.Open(t)
	ctx = ctxFor(t)
	rec = NewRecord("default", "web", 1)
	MustCreate(t, s1, rec)
	return s1, s2, ctx, rec, MustLease(t, ctx, s1, rec, "driver-1")
}

func testLease(t *testing.T, b Backend) {
	s1, s2, ctx, rec, l1 := holdLease(t, b)
	if _, err := s2.AcquireLease(ctx, "default", rec.ID, "driver-2"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("second AcquireLease: got %v, want ErrLeaseHeld", err)
	}
	if _, err := s1.AcquireLease(ctx, "default", rec.ID, "driver-1b"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireLease through the same handle: got %v, want ErrLeaseHeld", err)
	}
	select {
	case <-l1.Lost():
		t.Fatal("a held lease reports itself lost")
	default:
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	TakeFreeLease(t, ctx, s2, rec, "driver-2", "after Release")
	if _, err := s1.AcquireLease(ctx, "default", uuid.NewString(), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AcquireLease of an unknown restart: got %v, want ErrNotFound", err)
	}
}

// testLeaseFree: store.LeaseFree tells a held lease from a free one and leaves it free.
func testLeaseFree(t *testing.T, b Backend) {
	s1, s2, ctx, rec, l1 := holdLease(t, b)
	if free, err := store.LeaseFree(ctx, s2, "default", rec.ID, "probe"); err != nil || free {
		t.Fatalf("LeaseFree while held: got %v, %v; want false", free, err)
	}
	if got, err := s2.LeaseHolder(ctx, "default", rec.ID); err != nil || got != "driver-1" {
		t.Errorf("LeaseHolder while held: %q, %v; want driver-1", got, err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the probe gives the lease back: a second probe finds it free too
		if free, err := store.LeaseFree(ctx, s2, "default", rec.ID, "probe"); err != nil || !free {
			t.Fatalf("LeaseFree #%d after Release: got %v, %v; want true", i+1, free, err)
		}
	}
	TakeFreeLease(t, ctx, s1, rec, "driver-2", "after probes")
}

// testCreateLeased: a record created with CreateLeased is stored as Create stores it, and
// its lease is its creator's from then on: no other handle, nor the creator's own, takes
// it until the creator releases it.
func testCreateLeased(t *testing.T, b Backend) {
	s1, s2 := b.Open(t), b.Open(t)
	ctx := ctxFor(t)
	rec := NewRecord("default", "web", 2)
	rec.ID = ""
	l1, err := s1.CreateLeased(ctx, rec, "driver-1")
	if err != nil {
		t.Fatalf("CreateLeased: %v", err)
	}
	if rec.ID == "" || rec.CreateIndex == 0 || rec.ModifyIndex != rec.CreateIndex {
		t.Fatalf("CreateLeased did not set ID and indexes: ID=%q CreateIndex=%d ModifyIndex=%d", rec.ID, rec.CreateIndex, rec.ModifyIndex)
	}
	got, err := s2.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatalf("Get from another handle: %v", err)
	}
	sameContent(t, rec, got)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		other := b.Open(t)
		wg.Go(func() {
			_, errs[i] = other.AcquireLease(ctx, "default", rec.ID, fmt.Sprintf("driver-%d", i+2))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, store.ErrLeaseHeld) {
			t.Errorf("concurrent AcquireLease #%d of a restart created leased: got %v, want ErrLeaseHeld", i+1, err)
		}
	}
	if _, err := s1.AcquireLease(ctx, "default", rec.ID, "driver-1b"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireLease through the creator's handle: got %v, want ErrLeaseHeld", err)
	}
	if got, err := s2.LeaseHolder(ctx, "default", rec.ID); err != nil || got != "driver-1" {
		t.Errorf("LeaseHolder: %q, %v; want driver-1", got, err)
	}
	// A second creation of the same record is refused and leaves the lease with its holder.
	dup := NewRecord("default", "web", 1)
	dup.ID = rec.ID
	if _, err := s2.CreateLeased(ctx, dup, "driver-2"); !errors.Is(err, store.ErrExists) && !isBusy(err) {
		t.Fatalf("a second CreateLeased of the record: got %v, want ErrExists or JobBusyError", err)
	}
	if free, err := store.LeaseFree(ctx, s2, "default", rec.ID, "probe"); err != nil || free {
		t.Fatalf("LeaseFree after a refused second creation: %v, %v; want held", free, err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	TakeFreeLease(t, ctx, s2, rec, "driver-2", "after the creator released it")
}

// testCreateLeasedRefused: a CreateLeased that fails (the job busy) keeps neither the
// record nor its lease: once the job is free, the same record is created, leased, by
// another handle.
func testCreateLeasedRefused(t *testing.T, b Backend) {
	s1, s2 := b.Open(t), b.Open(t)
	ctx := ctxFor(t)
	first := NewRecord("default", "web", 1)
	MustCreate(t, s1, first)
	second := NewRecord("default", "web", 1)
	l, err := s2.CreateLeased(ctx, second, "driver-2")
	var busy *store.JobBusyError
	if !errors.As(err, &busy) || busy.RestartID != first.ID {
		t.Fatalf("CreateLeased of a busy job: got %v, want a JobBusyError naming %s", err, first.ID)
	}
	if l != nil {
		t.Fatal("a refused CreateLeased returned a lease")
	}
	if _, err := s1.Get(ctx, "default", second.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused record was stored: %v", err)
	}
	first.Status = restart.StatusSucceeded
	if err := s1.Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	l3, err := b.Open(t).CreateLeased(ctx, second, "driver-3")
	if err != nil {
		t.Fatalf("CreateLeased of the refused record once the job is free: %v (its lease was kept?)", err)
	}
	if got, err := s1.LeaseHolder(ctx, "default", second.ID); err != nil || got != "driver-3" {
		t.Errorf("LeaseHolder: %q, %v; want driver-3", got, err)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// testCreateLeasedRace: another process trying the lease of a restart while it is being
// created with CreateLeased (an agent that found it listed) never gets it: it finds no
// record, or the lease held.
func testCreateLeasedRace(t *testing.T, b Backend) {
	creator, racer := b.Open(t), b.Open(t)
	ctx := ctxFor(t)
	for round := range 10 {
		rec := NewRecord("default", fmt.Sprintf("race-%d", round), 1)
		id := rec.ID // rec is the creator's until CreateLeased returns
		done := make(chan struct{})
		var lease store.Lease
		var cerr error
		go func() {
			defer close(done)
			lease, cerr = creator.CreateLeased(ctx, rec, "creator")
		}()
		for racing := true; racing; {
			select {
			case <-done:
				racing = false // one more try, after the creation returned
			default:
			}
			l, err := racer.AcquireLease(ctx, "default", id, "racer")
			switch {
			case err == nil:
				_ = l.Release(ctx)
				<-done
				t.Fatalf("round %d: another process took the lease of a restart being created leased", round)
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrLeaseHeld):
			default:
				t.Fatalf("round %d: AcquireLease: %v", round, err)
			}
		}
		if cerr != nil {
			t.Fatalf("round %d: CreateLeased: %v", round, cerr)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testConcurrentCreateLeased: of concurrent CreateLeased for one job, one wins and holds
// its record's lease; the others store nothing.
func testConcurrentCreateLeased(t *testing.T, b Backend) {
	ctx := ctxFor(t)
	const n = 5
	var wg sync.WaitGroup
	recs := make([]*restart.Record, n)
	leases := make([]store.Lease, n)
	errs := make([]error, n)
	for i := range n {
		s := b.Open(t)
		recs[i] = NewRecord("default", "race", 1)
		wg.Go(func() { leases[i], errs[i] = s.CreateLeased(ctx, recs[i], fmt.Sprintf("driver-%d", i)) })
	}
	wg.Wait()
	check := b.Open(t)
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
			if _, err := check.AcquireLease(ctx, "default", recs[i].ID, "other"); !errors.Is(err, store.ErrLeaseHeld) {
				t.Errorf("the winner's lease: AcquireLease got %v, want ErrLeaseHeld", err)
			}
			if err := leases[i].Release(ctx); err != nil {
				t.Error(err)
			}
		case isBusy(err):
			if _, err := check.Get(ctx, "default", recs[i].ID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a refused record was stored: %v", err)
			}
		default:
			t.Errorf("CreateLeased: unexpected error %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent CreateLeased for one job succeeded, want exactly 1", wins)
	}
}

func testLargeRecord(t *testing.T, b Backend) {
	s := b.Open(t)
	ctx := ctxFor(t)
	rec := NewRecord("default", "big", 10000)
	for i := range rec.Allocs {
		rec.Allocs[i].Before = &restart.Observation{Restarts: map[string]uint64{"server": uint64(i % 7)}, AllocModifyIndex: uint64(i)}
	}
	for i := range restart.MaxEvents - 1 {
		rec.Events = append(rec.Events, restart.Event{Seq: uint64(i + 2), Type: restart.EventAllocDone, Message: fmt.Sprintf("allocation %s restarted and running again", rec.Allocs[i].ID), AllocID: rec.Allocs[i].ID, Batch: i + 1})
	}
	MustCreate(t, s, rec)
	s2 := b.Open(t)
	got, err := s2.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameContent(t, rec, got)
	// Change one allocation and the events; a reader sees the new whole.
	got.Allocs[5000].State = restart.AllocDone
	got.Allocs[9999].Error = "boom"
	got.Events = got.Events[1:]
	if err := s2.Update(ctx, got); err != nil {
		t.Fatalf("Update: %v", err)
	}
	again, err := s.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Full comparisons of 10,000 allocations are slow under -race; the first round trip
	// compared everything, this one checks what changed and the edges.
	if len(again.Allocs) != 10000 || again.Allocs[5000].State != restart.AllocDone || again.Allocs[9999].Error != "boom" ||
		again.Allocs[0].ID != rec.Allocs[0].ID || again.Allocs[4999].ID != rec.Allocs[4999].ID ||
		len(again.Events) != len(got.Events) || again.Events[0].Seq != got.Events[0].Seq || again.ModifyIndex != got.ModifyIndex {
		t.Fatalf("update of a large record read back wrong: %d allocs, %d events, index %d (want %d)", len(again.Allocs), len(again.Events), again.ModifyIndex, got.ModifyIndex)
	}
	// And shrinking it back to a small record works too.
	again.Allocs = again.Allocs[:2]
	again.Events = again.Events[:1]
	if err := s.Update(ctx, again); err != nil {
		t.Fatal(err)
	}
	small, err := s2.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameContent(t, again, small)
}
