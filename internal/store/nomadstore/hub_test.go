package nomadstore_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
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

// testGap paces the shared watch's lists in these tests: short, to keep them fast.
const testGap = 10 * time.Millisecond

func TestNomadSharedWatchSuite(t *testing.T) {
	runNomadSuite(t, nomadstore.Options{SharedWatch: true, SharedWatchGap: testGap})
}

type watchResult struct {
	i   int
	rec *restart.Record
	err error
}

// Many concurrent WatchHead waiters on a shared store hold one blocking query between
// them (a store without the option holds one each); a waiter wakes when its own record
// changes, with that change, and the others keep waiting without reading anything.
func TestNomadSharedWatchManyWaiters(t *testing.T) {
	const n = 200
	for _, tc := range []struct {
		shared bool
		// the most blocking queries open at once: at most maxPeak, and at least minPeak
		// (which shows the tracking counts: without the option each waiter holds one).
		minPeak, maxPeak int
	}{
		{shared: true, minPeak: 1, maxPeak: 1},
		{shared: false, minPeak: n / 2, maxPeak: n},
	} {
		name := "separate"
		if tc.shared {
			name = "shared"
		}
		t.Run(name, func(t *testing.T) {
			c := simtest.Start(t, nomadsim.Options{})
			writer := restartsOn(simtest.Client(t, c), nomadstore.Options{})
			cl, tr := simtest.TrackedClient(t, c, "")
			watcher := restartsOn(cl, nomadstore.Options{SharedWatch: tc.shared, SharedWatchGap: testGap})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			recs := createMany(t, ctx, writer, n)
			// The watcher learns where every record lives, as a driver's store does when it
			// reads the record it drives.
			if _, err := watcher.List(ctx, store.Filter{}); err != nil {
				t.Fatal(err)
			}
			tr.Reset()

			results := make(chan watchResult, n)
			for i, rec := range recs {
				go func() {
					r, err := watcher.WatchHead(ctx, "default", rec.ID, rec.ModifyIndex)
					results <- watchResult{i, r, err}
				}()
			}
			// Wait until every waiter is waiting: all blocking (without the option), or the
			// shared query open and every waiter judged against a listing (no waiter reads
			// while its record is unchanged, so reads stay 0).
			simtest.WaitFor(t, ctx, "the waiters to wait", func() bool {
				got := tr.Counts()
				if tc.shared {
					return got.Blocking == 1 && got.Lists >= 2
				}
				return got.Blocking == n
			})

			// Update the even records: their waiters, and only theirs, wake.
			updated := map[int]uint64{}
			for i := 0; i < n; i += 2 {
				rec := recs[i]
				rec.Control.Intent = restart.IntentPause
				if err := writer.Update(ctx, rec); err != nil {
					t.Fatal(err)
				}
				updated[i] = rec.ModifyIndex
			}
			for len(updated) > 0 {
				var r watchResult
				select {
				case r = <-results:
				case <-ctx.Done():
					t.Fatal("the waiters of updated records did not all wake")
				}
				want, ok := updated[r.i]
				switch {
				case !ok:
					t.Fatalf("waiter %d woke (%v, %v) but its record did not change (or it woke twice)", r.i, r.rec, r.err)
				case r.err != nil:
					t.Fatalf("waiter %d: %v", r.i, r.err)
				case r.rec.ModifyIndex != want || r.rec.Control.Intent != restart.IntentPause:
					t.Fatalf("waiter %d woke with index %d intent %q, want %d %q", r.i, r.rec.ModifyIndex, r.rec.Control.Intent, want, restart.IntentPause)
				}
				delete(updated, r.i)
			}
			select {
			case r := <-results:
				t.Fatalf("waiter %d woke (%v) but its record did not change: got index %d, created at %d", r.i, r.err, r.rec.ModifyIndex, recs[r.i].ModifyIndex)
			default:
			}
			got := tr.Counts()
			peak, reads := got.Peak, got.Reads
			if peak < tc.minPeak || peak > tc.maxPeak {
				t.Fatalf("%d blocking queries were open at once, want %d to %d", peak, tc.minPeak, tc.maxPeak)
			}
			if tc.shared && reads > n/2 {
				t.Fatalf("the shared watch read %d heads for %d changed records", reads, n/2)
			}
			cancel()
			for range n / 2 {
				if r := <-results; !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, context.DeadlineExceeded) {
					t.Fatalf("waiter %d after cancel: %v, %v", r.i, r.rec, r.err)
				}
			}
		})
	}
}

// createMany creates n records, of n jobs, a few at a time.
func createMany(t *testing.T, ctx context.Context, s store.Store, n int) []*restart.Record {
	t.Helper()
	recs := make([]*restart.Record, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range recs {
		recs[i] = storetest.NewRecord("default", "job-"+strconv.Itoa(i), 1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- s.Create(ctx, recs[i])
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

// sharedEnv is a cluster, a writer's store, and a shared-watch store on a tracked client
// that knows where the records live.
type sharedEnv struct {
	c       *nomadsim.Cluster
	writer  *nomadstore.Restarts
	watcher *nomadstore.Restarts
	tr      *simtest.Inflight
	recs    []*restart.Record
}

func newSharedEnv(t *testing.T, ctx context.Context, records int, gap time.Duration) *sharedEnv {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{})
	e := &sharedEnv{c: c, writer: restartsOn(simtest.Client(t, c), nomadstore.Options{})}
	cl, tr := simtest.TrackedClient(t, c, "")
	e.tr = tr
	e.watcher = restartsOn(cl, nomadstore.Options{SharedWatch: true, SharedWatchGap: gap, Logger: quiet})
	e.recs = createMany(t, ctx, e.writer, records)
	if _, err := e.watcher.List(ctx, store.Filter{}); err != nil {
		t.Fatal(err)
	}
	tr.Reset()
	return e
}

// watch runs WatchHead on record i in the background.
func (e *sharedEnv) watch(ctx context.Context, i int) <-chan watchResult {
	out := make(chan watchResult, 1)
	go func() {
		r, err := e.watcher.WatchHead(ctx, "default", e.recs[i].ID, e.recs[i].ModifyIndex)
		out <- watchResult{i, r, err}
	}()
	return out
}

func (e *sharedEnv) update(t *testing.T, ctx context.Context, i int) {
	t.Helper()
	e.recs[i].Control.Intent = restart.IntentPause
	if err := e.writer.Update(ctx, e.recs[i]); err != nil {
		t.Fatal(err)
	}
}

func (e *sharedEnv) open() int {
	return e.tr.Counts().Blocking
}

func receive(t *testing.T, ctx context.Context, ch <-chan watchResult, what string) watchResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
		return watchResult{}
	}
}

// checkAsleep fails the test when waiter ch has returned already; format says why it should
// not have, with the result's record and error as its first two verbs.
func checkAsleep(t *testing.T, ch <-chan watchResult, format string, args ...any) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf(format, append([]any{r.rec, r.err}, args...)...)
	default:
	}
}

// A waiter whose ctx ends leaves; the shared query ends with the last waiter, and starts
// again with the next.
func TestNomadSharedWatchCancel(t *testing.T) {
	ctx := storetest.Context(t, 60*time.Second)
	e := newSharedEnv(t, ctx, 2, testGap)
	actx, acancel := context.WithCancel(ctx)
	a, b := e.watch(actx, 0), e.watch(ctx, 1)
	simtest.WaitFor(t, ctx, "the shared query", func() bool { return e.open() == 1 })
	acancel()
	if r := receive(t, ctx, a, "the canceled waiter"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a canceled waiter returned %v, %v; want context.Canceled", r.rec, r.err)
	}
	e.update(t, ctx, 1)
	if r := receive(t, ctx, b, "the other waiter"); r.err != nil || r.rec.ModifyIndex != e.recs[1].ModifyIndex {
		t.Fatalf("the remaining waiter returned %v, %v; want index %d", r.rec, r.err, e.recs[1].ModifyIndex)
	}
	simtest.WaitFor(t, ctx, "the shared query to end with its last waiter", func() bool { return e.open() == 0 })

	a = e.watch(ctx, 0)
	simtest.WaitFor(t, ctx, "the shared query to start again", func() bool { return e.open() == 1 })
	e.update(t, ctx, 0)
	if r := receive(t, ctx, a, "a waiter of a restarted hub"); r.err != nil || r.rec.ModifyIndex != e.recs[0].ModifyIndex {
		t.Fatalf("a new waiter returned %v, %v; want index %d", r.rec, r.err, e.recs[0].ModifyIndex)
	}
}

// A record deleted while watched, or before, answers ErrNotFound.
func TestNomadSharedWatchDeleted(t *testing.T) {
	ctx := storetest.Context(t, 60*time.Second)
	e := newSharedEnv(t, ctx, 3, testGap)
	cl := simtest.Client(t, e.c)
	del := func(i int) {
		if _, err := cl.Variables().Delete("nomad-restart/"+e.recs[i].JobID+"/"+e.recs[i].ID, nil); err != nil {
			t.Fatal(err)
		}
	}
	keep, gone := e.watch(ctx, 0), e.watch(ctx, 1)
	simtest.WaitFor(t, ctx, "the shared query", func() bool { return e.open() == 1 })
	del(1)
	if r := receive(t, ctx, gone, "the deleted record's waiter"); !errors.Is(r.err, store.ErrNotFound) {
		t.Fatalf("WatchHead of a deleted record: %v, %v; want ErrNotFound", r.rec, r.err)
	}
	del(2)
	if r := receive(t, ctx, e.watch(ctx, 2), "the waiter of a record deleted before"); !errors.Is(r.err, store.ErrNotFound) {
		t.Fatalf("WatchHead of a record deleted before the call: %v, %v; want ErrNotFound", r.rec, r.err)
	}
	checkAsleep(t, keep, "a waiter woke (%v, %v) when another record was deleted")
}

// The shared list retries Nomad's passing failures (5xx, 429) until they pass, and ends
// its waiters with an error that retrying cannot mend (403).
func TestNomadSharedWatchListFailures(t *testing.T) {
	ctx := storetest.Context(t, 60*time.Second)
	e := newSharedEnv(t, ctx, 2, testGap)
	for _, status := range []int{http.StatusInternalServerError, http.StatusTooManyRequests} {
		e.tr.Reset()
		remove := e.c.SetFault(nomadsim.Fault{Method: http.MethodGet, Path: "/v1/vars", Status: status})
		w := e.watch(ctx, 0)
		simtest.WaitFor(t, ctx, "the failing list to be tried again", func() bool { return e.tr.Counts().Lists >= 3 })
		e.update(t, ctx, 0)
		checkAsleep(t, w, "a waiter woke (%v, %v) while every list failed with %d", status)
		remove()
		if r := receive(t, ctx, w, "the waiter once the list works"); r.err != nil || r.rec.ModifyIndex != e.recs[0].ModifyIndex {
			t.Fatalf("after %d failures passed, the waiter returned %v, %v; want index %d", status, r.rec, r.err, e.recs[0].ModifyIndex)
		}
	}
	remove := e.c.SetFault(nomadsim.Fault{Method: http.MethodGet, Path: "/v1/vars", Status: http.StatusForbidden, Body: "Permission denied"})
	defer remove()
	var perm *store.PermissionError
	if r := receive(t, ctx, e.watch(ctx, 1), "the waiter of a refused list"); !errors.As(r.err, &perm) || perm.Capability != "list" {
		t.Fatalf("WatchHead when Nomad refuses the list: %v, %v; want a PermissionError for list", r.rec, r.err)
	}
}

// However often variables change, the shared list is sent at most once per gap, and a
// waiter whose record does not change reads nothing.
func TestNomadSharedWatchPaced(t *testing.T) {
	const gap = 50 * time.Millisecond
	ctx := storetest.Context(t, 60*time.Second)
	e := newSharedEnv(t, ctx, 2, gap)
	w := e.watch(ctx, 1)
	simtest.WaitFor(t, ctx, "the shared query", func() bool { return e.open() == 1 })
	e.tr.Reset()
	start := time.Now()
	for range 40 {
		e.update(t, ctx, 0)
	}
	// Forty writes may take less than a gap: the woken list is then sent once it passed.
	simtest.WaitFor(t, ctx, "a list after the writes", func() bool { return e.tr.Counts().Lists > 0 })
	got := e.tr.Counts()
	lists, reads := got.Lists, got.Reads
	elapsed := time.Since(start)
	// Lists are sent at least gap apart, so the count is bounded by the time taken (a slow
	// machine only lowers it); the one in flight at the start adds one.
	if most := int(elapsed/gap) + 2; lists > most {
		t.Fatalf("%d lists in %v with a gap of %v: more than %d", lists, elapsed, gap, most)
	}
	if lists == 0 {
		t.Fatal("40 writes sent no list: the shared query did not wake")
	}
	if reads != 0 {
		t.Fatalf("the waiter of an unchanged record read %d times", reads)
	}
	checkAsleep(t, w, "a waiter woke (%v, %v) though its record did not change")
}

// Each namespace has its own shared query: waiters in two namespaces hold two, and a change
// in one wakes only its waiter.
func TestNomadSharedWatchNamespaces(t *testing.T) {
	ctx := storetest.Context(t, 60*time.Second)
	e := newSharedEnv(t, ctx, 2, testGap)
	if _, err := simtest.Client(t, e.c).Namespaces().Register(&api.Namespace{Name: "other"}, nil); err != nil {
		t.Fatal(err)
	}
	other := storetest.NewRecord("other", "web", 1)
	if err := e.writer.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := e.watcher.Get(ctx, "other", other.ID); err != nil {
		t.Fatal(err)
	}
	e.tr.Reset()
	inDefault := e.watch(ctx, 0)
	inOther := make(chan watchResult, 1)
	go func() {
		r, err := e.watcher.WatchHead(ctx, "other", other.ID, other.ModifyIndex)
		inOther <- watchResult{-1, r, err}
	}()
	simtest.WaitFor(t, ctx, "a shared query per namespace", func() bool { return e.open() == 2 })
	other.Control.Intent = restart.IntentCancel
	if err := e.writer.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, ctx, inOther, "the other namespace's waiter"); r.err != nil || r.rec.ModifyIndex != other.ModifyIndex || r.rec.Namespace != "other" {
		t.Fatalf("WatchHead in namespace other: %+v, %v; want index %d", r.rec, r.err, other.ModifyIndex)
	}
	checkAsleep(t, inDefault, "a waiter in namespace default woke (%v, %v) on a change in another namespace")
	if peak := e.tr.Counts().Peak; peak > 2 {
		t.Fatalf("%d blocking queries were open at once for two namespaces", peak)
	}
}

// A woken waiter whose read of its head fails for a passing reason (Nomad's 429) tries
// again until it passes.
func TestNomadSharedWatchReadRetried(t *testing.T) {
	ctx := storetest.Context(t, 60*time.Second)
	e := newSharedEnv(t, ctx, 1, testGap)
	w := e.watch(ctx, 0)
	simtest.WaitFor(t, ctx, "the shared query", func() bool { return e.open() == 1 })
	remove := e.c.SetFault(nomadsim.Fault{Method: http.MethodGet, Path: "/v1/var/", Status: http.StatusTooManyRequests})
	defer remove()
	e.update(t, ctx, 0)
	simtest.WaitFor(t, ctx, "the refused read to be tried again", func() bool { return e.tr.Counts().Reads >= 3 })
	checkAsleep(t, w, "the waiter returned (%v, %v) while every read of its head was refused")
	remove()
	if r := receive(t, ctx, w, "the waiter once reads work"); r.err != nil || r.rec.ModifyIndex != e.recs[0].ModifyIndex {
		t.Fatalf("after the refusals passed, the waiter returned %v, %v; want index %d", r.rec, r.err, e.recs[0].ModifyIndex)
	}
}
