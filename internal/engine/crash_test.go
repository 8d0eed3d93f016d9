package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

var errCrashed = errors.New("driver crashed")

// crashStore lets n Updates through and then behaves like a dead process: right after the
// n-th write it cancels the driver's context (the fake cluster then refuses every request, as
// a dead process sends none) and writes nothing more, so the record stays exactly as the last
// successful step left it.
type crashStore struct {
	store.Store
	mu     sync.Mutex
	n      int
	cancel context.CancelFunc
	// early: die right after the n-th write (its step is not acted on); otherwise die at the
	// next write (the step's action, such as a request to Nomad, happened but its outcome is
	// not recorded).
	early   bool
	crashed bool
}

func (s *crashStore) Update(ctx context.Context, rec *restart.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashed {
		return errCrashed
	}
	if s.n == 0 {
		s.crashed = true
		s.cancel()
		return errCrashed
	}
	s.n--
	err := s.Store.Update(ctx, rec)
	if s.n == 0 && s.early {
		// Die right after this write: the step it stored (an intent, say) is not acted on.
		s.crashed = true
		s.cancel()
	}
	return err
}

// TestCrashAtEveryStep kills the driver after each possible number of persisted steps, then
// lets a new driver resume from the record; every allocation must be restarted exactly once.
func TestCrashAtEveryStep(t *testing.T) {
	for _, reschedule := range []bool{false, true} {
		for _, typ := range []string{"service", "batch", "system"} {
			t.Run(fmt.Sprintf("%s/reschedule=%v", typ, reschedule), func(t *testing.T) {
				// A clean run tells how many steps there are.
				total := countSteps(t, typ, reschedule)
				for k := 0; k <= 2*(total+5); k++ {
					n, early := k/2, k%2 == 1
					fc := newFakeCluster(typ, map[string]int{"a": 2, "b": 1})
					e, s := newTestEngine(t, fc)
					rec := planAndCreate(t, e, restart.Spec{Reschedule: reschedule, BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true})

					ctx, cancel := context.WithCancel(context.Background())
					cs := &crashStore{Store: s, n: n, cancel: cancel, early: early}
					crashing := New(Config{Cluster: fc, Store: cs, Holder: "crashing:1"})
					_, err := crashing.Drive(ctx, rec.Namespace, rec.ID, nil)
					cancel()
					// Concurrent steps share writes, so the number of writes of a run varies a
					// little; a driver that finished before its crash point ends the sweep.
					finished := err == nil

					final := drive(t, e, rec, nil)
					if final.Status != restart.StatusSucceeded {
						t.Fatalf("crash after %d steps (early %v): status %s (%s)", n, early, final.Status, final.Reason)
					}
					assertOnce(t, fc.counts(reschedule), final)
					if finished {
						break
					}
				}
			})
		}
	}
}

type countingStore struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (s *countingStore) Update(ctx context.Context, rec *restart.Record) error {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.Update(ctx, rec)
}

func countSteps(t *testing.T, typ string, reschedule bool) int {
	fc := newFakeCluster(typ, map[string]int{"a": 2, "b": 1})
	e, s := newTestEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{Reschedule: reschedule, BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true})
	cs := &countingStore{Store: s}
	final := drive(t, New(Config{Cluster: fc, Store: cs, Holder: "count:1"}), rec, nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("clean run: %s (%s)", final.Status, final.Reason)
	}
	return cs.n
}
