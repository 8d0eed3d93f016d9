package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// degrade sets the task of the oldest allocation of the fake job pending (out of service),
// or running again, and returns its ID.
func (f *fakeCluster) degrade(down bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var oldest *restart.Alloc
	for _, a := range f.allocs {
		if oldest == nil || a.CreateIndex < oldest.CreateIndex {
			oldest = a
		}
	}
	ts := oldest.Tasks["main"]
	ts.State = restart.TaskRunning
	if down {
		ts.State = restart.TaskPending
	}
	oldest.Tasks["main"] = ts
	f.bumpLocked(oldest)
	return oldest.ID
}

func newBudgetEngine(t *testing.T, fc *fakeCluster) (*Engine, *memStore) {
	t.Helper()
	s := newMemStore()
	// A fast time scale: the waits the engine counts in Nomad's time (the gate's ticks, the
	// client sync grace) pass quickly.
	return New(Config{Cluster: fc, Store: s, Holder: "test:1", Health: HealthConfig{TimeScale: 100}}), s
}

// TestBudgetWaitsForADegradedGroup: one allocation of three is out of service before the
// restart; with batches of one (the default budget) the first batch waits, saying why,
// until it serves again.
func TestBudgetWaitsForADegradedGroup(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 3})
	fc.degrade(true)
	e, s := newBudgetEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{Yes: true})
	wait, cancel := driveAsync(e, rec)
	defer cancel()
	r := waitStatus(t, s, rec, func(r *restart.Record) bool { return strings.Contains(r.Allocs[0].Waiting, "availability budget") })
	if !strings.Contains(r.Allocs[0].Waiting, `group "web": 1 of 3 allocations out of service`) {
		t.Fatalf("waiting %q", r.Allocs[0].Waiting)
	}
	if n := len(fc.counts(false)); n != 0 {
		t.Fatalf("%d allocations restarted while the budget was spent", n)
	}
	fc.degrade(false)
	final := waitEnded(t, wait, restart.StatusSucceeded)
	assertOnce(t, fc.counts(false), final)
}

// TestBudgetDeadline: the budget never frees up; at the deadline the batch fails without a
// restart, and -on-error decides: fail ends the restart, ask asks.
func TestBudgetDeadline(t *testing.T) {
	for _, onError := range []restart.OnError{restart.OnErrorFail, restart.OnErrorAsk} {
		t.Run(string(onError), func(t *testing.T) {
			fc := newFakeCluster("service", map[string]int{"web": 3})
			fc.degrade(true)
			e, s := newBudgetEngine(t, fc)
			rec := planAndCreate(t, e, restart.Spec{OnError: onError, HealthyDeadline: 100 * time.Millisecond})
			wait, cancel := driveAsync(e, rec)
			defer cancel()
			r := waitStatus(t, s, rec, func(r *restart.Record) bool { return r.Status.Terminal() || r.Status == restart.StatusWaiting })
			want := restart.StatusFailed
			if onError == restart.OnErrorAsk {
				want = restart.StatusWaiting
			}
			if r.Status != want || r.Allocs[0].State != restart.AllocFailed || !strings.Contains(r.Allocs[0].Error, "availability budget") {
				t.Fatalf("status %s, first allocation %s %q", r.Status, r.Allocs[0].State, r.Allocs[0].Error)
			}
			if n := len(fc.counts(false)); n != 0 {
				t.Fatalf("%d allocations restarted", n)
			}
			cancel()
			_, _ = wait()
		})
	}
}

// TestBudgetExplicit: -max-unavailable 2 lets batches of one run on a group with one
// allocation down; a budget smaller than a batch is refused at planning.
func TestBudgetExplicit(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 3})
	fc.degrade(true)
	e, _ := newBudgetEngine(t, fc)
	final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true, MaxUnavailable: &restart.BatchSize{N: 2}}), nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	_, err := e.Plan(t.Context(), Request{Job: "web", Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, MaxUnavailable: &restart.BatchSize{N: 1}}})
	if err == nil || !strings.Contains(err.Error(), "lower -batch-size or raise -max-unavailable") {
		t.Fatalf("Plan: %v", err)
	}
}

// TestUnhealthyFirst: the allocation out of service, last in Nomad's order (the oldest),
// comes first with -unhealthy-first, and the restart then needs no budget wait.
func TestUnhealthyFirst(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 3})
	down := fc.degrade(true)
	e, _ := newBudgetEngine(t, fc)
	plain := planAndCreate(t, e, restart.Spec{Yes: true})
	if plain.Allocs[0].ID == down {
		t.Fatalf("the degraded allocation is first without -unhealthy-first: the test proves nothing")
	}
	p, err := e.Plan(t.Context(), Request{Job: "web", Spec: restart.Spec{Yes: true, UnhealthyFirst: true}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Record.Allocs[0].ID != down {
		t.Fatalf("first planned %s, want the degraded %s", p.Record.Allocs[0].ID, down)
	}
}
