package engine

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func at(id string, modify uint64) *restart.Alloc { return &restart.Alloc{ID: id, ModifyIndex: modify} }

// withEvents is an allocation whose task app has events at the given seconds.
func withEvents(id string, modify uint64, secs ...int) *restart.Alloc {
	a := at(id, modify)
	ts := restart.TaskState{State: restart.TaskRunning, Restarts: 1}
	for _, s := range secs {
		ts.Events = append(ts.Events, restart.TaskEvent{Type: "e", Time: time.Unix(int64(s), 0)})
	}
	a.Tasks = map[string]restart.TaskState{"app": ts}
	return a
}

func TestFeedObservedOnlyWhenSynced(t *testing.T) {
	f := newAllocFeed()
	f.apply(withEvents("a", 10, 1, 3, 2))
	if _, ok := f.observed("a"); ok {
		t.Fatal("not synced: nothing is observed")
	}
	f.setSynced(true)
	a, ok := f.observed("a")
	if !ok || a.ModifyIndex != 10 {
		t.Fatalf("observed = %v, %v; want index 10", a, ok)
	}
	// In brief: the newest event only, which is what an observation reads.
	if ev := a.Tasks["app"].Events; len(ev) != 1 || ev[0].Time.Unix() != 3 {
		t.Fatalf("events in brief = %v, want the newest (3)", ev)
	}
	if got := restart.Observe(a, []string{"app"}).LastEventTime.Unix(); got != 3 {
		t.Fatalf("observation's newest event at %d, want 3", got)
	}
	f.offer(at("a", 9)) // a read older than what the stream showed changes nothing
	if a, _ := f.observed("a"); a.ModifyIndex != 10 {
		t.Fatalf("an older read replaced the state: index %d", a.ModifyIndex)
	}
	f.setSynced(false) // a lost connection
	if _, ok := f.observed("a"); ok {
		t.Fatal("a gap makes nothing observed")
	}
	f.setSynced(true)
	f.end()
	if _, ok := f.observed("a"); ok {
		t.Fatal("an ended feed observes nothing")
	}
}

func TestFeedKeepsFullStatesOfPinnedOnly(t *testing.T) {
	f := newAllocFeed()
	f.setSynced(true)
	f.pin("a")
	full := withEvents("a", 5, 1, 2, 3)
	f.apply(full)
	if a, ok := f.held("a"); !ok || len(a.Tasks["app"].Events) != 3 {
		t.Fatalf("a pinned allocation keeps its events: %v, %v", a, ok)
	}
	if a, _ := f.observed("a"); len(a.Tasks["app"].Events) != 1 || len(full.Tasks["app"].Events) != 3 {
		t.Fatal("the brief has the newest event only, and leaves the state given whole")
	}
	f.unpin("a")
	if _, ok := f.held("a"); ok {
		t.Fatal("unpinned: its full state is let go")
	}
	if a, ok := f.observed("a"); !ok || a.ModifyIndex != 5 {
		t.Fatalf("unpinned: still observed in brief, got %v, %v", a, ok)
	}
	read := withEvents("b", 7, 1, 2)
	f.offer(read) // a read: the caller keeps its allocation whole
	if len(read.Tasks["app"].Events) != 2 {
		t.Fatal("offering a read cut the caller's events")
	}
	stub := at("c", 8) // a list stub without task states
	f.apply(stub)
	if a, _ := f.observed("c"); a.Tasks != nil {
		t.Fatalf("a stub's brief has task states: %v", a.Tasks)
	}
}

// The brief of an allocation expands to the same allocation but for the older events.
func TestFeedBriefExpands(t *testing.T) {
	a := withEvents("a", 9, 4, 8, 6)
	a.Name, a.Group, a.ClientStatus, a.DesiredStatus, a.NextAllocation = "web[0]", "web", "running", "run", ""
	got := inBrief(a).expand()
	want := *a
	want.Tasks = map[string]restart.TaskState{"app": a.Tasks["app"]}
	ts := want.Tasks["app"]
	ts.Events = []restart.TaskEvent{a.Tasks["app"].Events[1]}
	want.Tasks["app"] = ts
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("expanded\n%+v\nwant\n%+v", got, &want)
	}
}

func TestFeedWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := newAllocFeed()
	f.setSynced(true)
	f.apply(at("a", 5))

	// A change it saw but did not hold: the caller reads.
	if _, err := f.wait(ctx, "a", 3); !errors.Is(err, errFeedMiss) {
		t.Fatalf("wait after a change not held = %v, want errFeedMiss", err)
	}
	// Waiting from the last change: answered by the next event.
	got := make(chan *restart.Alloc, 1)
	go func() {
		a, err := f.wait(ctx, "a", 5)
		if err != nil {
			t.Error(err)
		}
		got <- a
	}()
	for !f.hasWaiter("a") {
		time.Sleep(time.Millisecond)
	}
	f.apply(at("a", 7))
	if a := <-got; a == nil || a.ModifyIndex != 7 {
		t.Fatalf("wait = %v, want index 7", a)
	}
	// A gap while waiting: the caller falls back to a blocking query.
	errs := make(chan error, 1)
	go func() {
		_, err := f.wait(ctx, "a", 7)
		errs <- err
	}()
	for !f.hasWaiter("a") {
		time.Sleep(time.Millisecond)
	}
	f.setSynced(false)
	if err := <-errs; !errors.Is(err, errFeedMiss) {
		t.Fatalf("wait across a gap = %v, want errFeedMiss", err)
	}
	// The feed's end: the same.
	f.setSynced(true)
	f.end()
	if _, err := f.wait(ctx, "a", 7); !errors.Is(err, errFeedMiss) {
		t.Fatalf("wait on an ended feed = %v, want errFeedMiss", err)
	}
	// The caller's context ends the wait.
	g := newAllocFeed()
	g.setSynced(true)
	short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
	defer stop()
	if _, err := g.wait(short, "b", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline = %v", err)
	}
}

func TestFeedNilIsInert(t *testing.T) {
	var f *allocFeed
	f.pin("a")
	f.offer(at("a", 1))
	f.unpin("a")
	if _, ok := f.observed("a"); ok {
		t.Fatal("a nil feed holds nothing")
	}
}

// hasWaiter is for tests: whether a wait on the allocation has registered.
func (f *allocFeed) hasWaiter(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.wake[id]
	return ok
}

func TestFeedGroupCounts(t *testing.T) {
	f := newAllocFeed()
	for i, st := range []string{restart.ClientRunning, restart.ClientRunning, restart.ClientPending, restart.ClientComplete} {
		a := at(string(rune('a'+i)), uint64(i+1))
		a.Group, a.ClientStatus = "web", st
		f.apply(a)
	}
	if _, ok := f.groupCounts(); ok {
		t.Fatal("not synced: no counts")
	}
	f.setSynced(true)
	c, ok := f.groupCounts()
	if !ok || c["web"].Running != 2 || c["web"].Starting != 1 {
		t.Fatalf("counts = %+v, %v; want 2 running, 1 starting", c, ok)
	}
	// The pending one runs, a running one completes, and an older state arrives late.
	f.apply(&restart.Alloc{ID: "c", ModifyIndex: 10, Group: "web", ClientStatus: restart.ClientRunning})
	f.apply(&restart.Alloc{ID: "a", ModifyIndex: 11, Group: "web", ClientStatus: restart.ClientComplete})
	f.apply(&restart.Alloc{ID: "a", ModifyIndex: 5, Group: "web", ClientStatus: restart.ClientRunning})
	if c, _ := f.groupCounts(); c["web"].Running != 2 || c["web"].Starting != 0 {
		t.Fatalf("counts after changes = %+v; want 2 running, 0 starting", c["web"])
	}
}

func TestFeedTooManyGaps(t *testing.T) {
	var gaps []time.Time
	t0 := time.Unix(1000, 0)
	for i := range maxFeedGaps - 1 {
		if tooManyGaps(&gaps, t0.Add(time.Duration(i)*20*time.Second)) {
			t.Fatalf("gap %d ended the feed", i+1)
		}
	}
	// The first gaps are older than the window by now: still fine.
	if tooManyGaps(&gaps, t0.Add(2*feedGapWindow)) {
		t.Fatal("gaps outside the window counted")
	}
	for i := range maxFeedGaps - 2 {
		if tooManyGaps(&gaps, t0.Add(2*feedGapWindow+time.Duration(i+1)*time.Second)) {
			t.Fatalf("gap %d within the window ended the feed too early", i+2)
		}
	}
	if !tooManyGaps(&gaps, t0.Add(2*feedGapWindow+10*time.Second)) {
		t.Fatalf("%d gaps within a minute did not end the feed", maxFeedGaps)
	}
}

// TestE2EFeed restarts a job while the job's event stream works, is refused, or keeps
// breaking: each ends with every allocation restarted exactly once. With the stream, the
// allocations are neither read before their requests nor followed with blocking queries;
// refused, the driver reads and follows them as before.
func TestE2EFeed(t *testing.T) {
	cases := []struct {
		name  string
		fault *nomadsim.Fault
		// maxReads bounds the allocation reads per restarted allocation.
		maxReads float64
		// minReads: at least this many per allocation (the fallback's reads).
		minReads float64
	}{
		{name: "stream", maxReads: 0.2},
		{name: "stream refused", fault: &nomadsim.Fault{Path: "/v1/event/stream", Status: http.StatusForbidden, Body: "Permission denied"}, minReads: 2},
		{name: "stream breaking", fault: &nomadsim.Fault{Path: "/v1/event/stream", ErrorRate: 0.5, Drop: true}, maxReads: 4},
	}
	for _, tc := range cases {
		for _, resched := range []bool{false, true} {
			name := tc.name + "/in place"
			if resched {
				name = tc.name + "/reschedule"
			}
			t.Run(name, func(t *testing.T) {
				env := startSim(t, true)
				env.register(t, "web", "service", map[string]int{"api": 6, "web": 4})
				if tc.fault != nil {
					env.sim.SetFault(*tc.fault)
				}
				rec := env.plan(t, "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 4}}, Reschedule: resched, Yes: true})
				env.sim.ResetStats()
				var l eventLog
				final := drive(t, env.e, rec, &l)
				if final.Status != restart.StatusSucceeded {
					t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, l.messages())
				}
				reads := float64(env.sim.Stats().Get("GET", "/v1/allocation/:id").Requests) / float64(len(final.Allocs))
				env.checkOnce(t, final)
				if tc.maxReads > 0 && reads > tc.maxReads {
					t.Errorf("%.2f allocation reads per allocation, want at most %.2f", reads, tc.maxReads)
				}
				if reads < tc.minReads {
					t.Errorf("%.2f allocation reads per allocation, want at least %.2f (the driver must follow them somehow)", reads, tc.minReads)
				}
				t.Logf("%.2f allocation reads per allocation", reads)
			})
		}
	}
}
