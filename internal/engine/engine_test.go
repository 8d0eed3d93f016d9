package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
)

const testTimeout = 20 * time.Second

// newTestEngine returns an engine on an in-memory store (fast); newLocalEngine one on the
// real local store.
func newTestEngine(t *testing.T, c cluster.Cluster) (*Engine, store.Store) {
	s := newMemStore()
	return New(Config{Cluster: c, Store: s, Holder: "test:1"}), s
}

func newLocalEngine(t *testing.T, c cluster.Cluster) (*Engine, store.Store) {
	t.Helper()
	s := localStore(t)
	return New(Config{Cluster: c, Store: s, Holder: "test:1"}), s
}

// localStore opens a local store (the one of -state local) in the test's temporary
// directory.
func localStore(t testing.TB) store.Store {
	t.Helper()
	s, err := localstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// planAndCreate plans a restart of the fake job with spec and stores it.
func planAndCreate(t *testing.T, e *Engine, spec restart.Spec) *restart.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	p, err := e.Plan(ctx, Request{Job: "we", Spec: spec})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return p.Record
}

// eventLog collects the events a sink receives.
type eventLog struct {
	mu     sync.Mutex
	events []restart.Event
}

func (l *eventLog) sink(e restart.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) messages() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.events {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

func drive(t *testing.T, e *Engine, rec *restart.Record, l *eventLog) *restart.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var sink func(restart.Event)
	if l != nil {
		sink = l.sink
	}
	final, err := e.Drive(ctx, rec.Namespace, rec.ID, sink)
	if err != nil {
		t.Fatalf("Drive: %v", err)
	}
	return final
}

func assertOnce(t *testing.T, got map[string]int, rec *restart.Record) {
	t.Helper()
	for _, a := range rec.Allocs {
		if got[a.ID] != 1 {
			t.Errorf("allocation %s restarted %d times, want once (state %s, error %q)", a.ID, got[a.ID], a.State, a.Error)
		}
	}
	if len(got) != len(rec.Allocs) {
		t.Errorf("%d allocations restarted, %d planned", len(got), len(rec.Allocs))
	}
}

func TestDriveInPlace(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"api": 3, "web": 2})
	e, _ := newLocalEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true})
	if rec.Batches != 3 || len(rec.Allocs) != 5 {
		t.Fatalf("plan: %d batches of %d allocs", rec.Batches, len(rec.Allocs))
	}
	var l eventLog
	final := drive(t, e, rec, &l)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	assertOnce(t, fc.counts(false), final)
	msgs := l.messages()
	for _, want := range []string{"Restarting 5 allocations", "Restarting 1st batch of 2 allocations", "Restarting 3rd batch of 1 allocation",
		"Restarting running tasks in allocation", "is running again", "Job restart finished"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("events lack %q:\n%s", want, msgs)
		}
	}
	for _, a := range final.Allocs {
		if a.State != restart.AllocDone || a.Attempts != 1 || a.Before == nil {
			t.Errorf("alloc %+v", a)
		}
	}
}

func TestDriveReschedule(t *testing.T) {
	for _, typ := range []string{"service", "system", "batch"} {
		t.Run(typ, func(t *testing.T) {
			fc := newFakeCluster(typ, map[string]int{"web": 3})
			e, _ := newTestEngine(t, fc)
			rec := planAndCreate(t, e, restart.Spec{Reschedule: true, BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true})
			var l eventLog
			final := drive(t, e, rec, &l)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)", final.Status, final.Reason)
			}
			assertOnce(t, fc.counts(true), final)
			for _, a := range final.Allocs {
				if a.Replacement == "" || a.StopIndex == 0 {
					t.Errorf("alloc %s: replacement %q stop index %d", a.ID, a.Replacement, a.StopIndex)
				}
			}
			if want := map[string]int{"system": 3}[typ]; fc.evals != want {
				t.Errorf("forced evaluations %d, want %d", fc.evals, want)
			}
			if !strings.Contains(l.messages(), "replaced by") {
				t.Errorf("no replacement event:\n%s", l.messages())
			}
		})
	}
}

func TestPlanRefusals(t *testing.T) {
	fc := newFakeCluster("sysbatch", map[string]int{"web": 1})
	e, _ := newTestEngine(t, fc)
	ctx := context.Background()
	cases := []struct {
		name string
		req  Request
		want string
	}{
		{"sysbatch reschedule", Request{Job: "web", Spec: restart.Spec{Reschedule: true}}, "not allowed to be rescheduled"},
		{"unknown job", Request{Job: "nope"}, "No job(s) with prefix or ID"},
		{"unknown group", Request{Job: "web", Spec: restart.Spec{Groups: []string{"x"}}}, `group "x" not found`},
		{"unknown task", Request{Job: "web", Spec: restart.Spec{Tasks: []string{"x"}}}, `task "x" not found`},
	}
	for _, tc := range cases {
		if _, err := e.Plan(ctx, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	fc.deployment = &cluster.Deployment{ID: "0123456789", Status: "running"}
	if _, err := e.Plan(ctx, Request{Job: "web"}); err == nil || !strings.Contains(err.Error(), `Deployment "01234567" is "running"`) {
		t.Errorf("deployment: %v", err)
	}
}

func TestCreateBusy(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 1})
	e, _ := newTestEngine(t, fc)
	planAndCreate(t, e, restart.Spec{})
	p, err := e.Plan(context.Background(), Request{Job: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var busy *store.JobBusyError
	if err := e.Create(context.Background(), p.Record); !errors.As(err, &busy) {
		t.Fatalf("second Create: %v", err)
	}
}

func TestOnErrorFail(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 3})
	fc.permanent["restart"] = errors.New("Unexpected response code: 500 (Task not running)")
	e, _ := newTestEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{OnError: restart.OnErrorFail})
	final := drive(t, e, rec, nil)
	if final.Status != restart.StatusFailed || !strings.Contains(final.Reason, "Task not running") {
		t.Fatalf("status %s reason %q", final.Status, final.Reason)
	}
	if fc.calls["restart"] != 1 {
		t.Fatalf("%d restart requests, want 1", fc.calls["restart"])
	}
	if final.Allocs[1].State != restart.AllocPending {
		t.Fatalf("second alloc touched: %+v", final.Allocs[1])
	}
}

func TestYesErrors(t *testing.T) {
	cases := []struct {
		name     string
		err      error
		requests int
	}{
		{"recoverable continues", errors.New("Unexpected response code: 500 (Task not running)"), 3},
		{"unrecoverable stops", errors.New("Unexpected response code: 403 (Permission denied)"), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFakeCluster("service", map[string]int{"web": 3})
			fc.permanent["restart"] = tc.err
			e, _ := newTestEngine(t, fc)
			final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true}), nil)
			if final.Status != restart.StatusFailed {
				t.Fatalf("status %s", final.Status)
			}
			if fc.calls["restart"] != tc.requests {
				t.Fatalf("%d restart requests, want %d", fc.calls["restart"], tc.requests)
			}
		})
	}
}

// waitFor drives in the background and waits until the record satisfies cond.
func waitStatus(t *testing.T, s store.Store, rec *restart.Record, cond func(*restart.Record) bool) *restart.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var idx uint64
	for {
		r, err := s.Watch(ctx, rec.Namespace, rec.ID, idx)
		if err != nil {
			t.Fatalf("waiting for the record: %v", err)
		}
		if cond(r) {
			return r
		}
		idx = r.ModifyIndex
	}
}

func driveAsync(e *Engine, rec *restart.Record) (func() (*restart.Record, error), context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	type res struct {
		r   *restart.Record
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := e.Drive(ctx, rec.Namespace, rec.ID, nil)
		ch <- res{r, err}
	}()
	return func() (*restart.Record, error) { r := <-ch; cancel(); return r.r, r.err }, cancel
}

// waitEnded returns the record the drive wait waits on ended with, and fails the test unless
// it ended without an error, with status want.
func waitEnded(t *testing.T, wait func() (*restart.Record, error), want restart.Status) *restart.Record {
	t.Helper()
	final, err := wait()
	if err != nil || final.Status != want {
		var got restart.Status
		var events string
		if final != nil {
			got, events = final.Status, eventLines(final)
		}
		t.Fatalf("the drive ended %s (err %v), want %s; events:\n%s", got, err, want, events)
	}
	return final
}

func TestQuestions(t *testing.T) {
	t.Run("errors asked, yes continues, last batch asked", func(t *testing.T) {
		fc := newFakeCluster("service", map[string]int{"web": 2})
		fc.permanent["restart"] = errors.New("Unexpected response code: 500 (Task not running)")
		e, s := newTestEngine(t, fc)
		rec := planAndCreate(t, e, restart.Spec{})
		wait, _ := driveAsync(e, rec)
		r := waitStatus(t, s, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
		if r.Question.Prompt() != "Ignore the errors above and proceed with the next batch? [y/N]" {
			t.Fatalf("question %q", r.Question.Prompt())
		}
		for _, bad := range []string{"maybe", "timeout", "EOF"} { // texts that look transient must not be retried
			if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, bad, "op"); !errors.Is(err, restart.ErrInvalidAnswer) {
				t.Fatalf("invalid answer %q accepted: %v", bad, err)
			}
		}
		if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, "y", "op"); err != nil {
			t.Fatal(err)
		}
		r = waitStatus(t, s, rec, func(r *restart.Record) bool {
			return r.Status == restart.StatusWaiting && r.Question.Kind == restart.QuestionLastBatch
		})
		if r.Question.Default != "n" {
			t.Fatalf("last-batch question defaults to %q", r.Question.Default)
		}
		// An empty answer is refused; Enter at a prompt takes the default through AtPrompt.
		if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, "", "op"); !errors.Is(err, restart.ErrInvalidAnswer) {
			t.Fatalf("an empty answer: %v, want it refused", err)
		}
		if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, restart.AtPrompt(r.Question, ""), "op"); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, wait, restart.StatusFailed)
	})
	t.Run("batch wait ask with a duration", func(t *testing.T) {
		fc := newFakeCluster("service", map[string]int{"web": 3})
		e, s := newTestEngine(t, fc)
		rec := planAndCreate(t, e, restart.Spec{BatchWaitAsk: true})
		wait, _ := driveAsync(e, rec)
		r := waitStatus(t, s, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
		if r.Question.Prompt() != "Proceed with the next batch? [Y/n/<wait duration>]" {
			t.Fatalf("question %q", r.Question.Prompt())
		}
		if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, "1ms", "op"); err != nil {
			t.Fatal(err)
		}
		final, err := wait()
		if err != nil || final.Status != restart.StatusSucceeded || final.BatchWait != time.Millisecond || final.BatchWaitAsk {
			t.Fatalf("final %v wait %v ask %v err %v", final.Status, final.BatchWait, final.BatchWaitAsk, err)
		}
		assertOnce(t, fc.counts(false), final)
	})
	t.Run("no cancels", func(t *testing.T) {
		fc := newFakeCluster("service", map[string]int{"web": 3})
		e, s := newTestEngine(t, fc)
		rec := planAndCreate(t, e, restart.Spec{BatchWaitAsk: true})
		wait, _ := driveAsync(e, rec)
		waitStatus(t, s, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
		if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, "n", "op"); err != nil {
			t.Fatal(err)
		}
		assertCanceledAfterOne(t, wait, fc)
	})
}

// assertCanceledAfterOne checks that the restart wait drives ends canceled, after the
// first of its allocations was restarted and no other.
func assertCanceledAfterOne(t *testing.T, wait func() (*restart.Record, error), fc *fakeCluster) {
	t.Helper()
	waitEnded(t, wait, restart.StatusCanceled)
	if n := len(fc.counts(false)); n != 1 {
		t.Fatalf("%d allocations restarted, want 1", n)
	}
}

func TestPauseResumeCancel(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 4})
	e, s := newLocalEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{BatchWait: time.Hour})
	wait, _ := driveAsync(e, rec)
	waitStatus(t, s, rec, func(r *restart.Record) bool { return !r.NextBatchAt.IsZero() })
	if _, err := e.Pause(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, rec, func(r *restart.Record) bool { return r.Status == restart.StatusPaused })
	if _, err := e.Cancel(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	assertCanceledAfterOne(t, wait, fc)
	if _, err := e.Resume(context.Background(), rec.Namespace, rec.ID, "op"); err == nil {
		t.Fatal("resumed a canceled restart")
	}
}

func TestCancelUndriven(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 2})
	e, _ := newTestEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{})
	r, err := e.Cancel(context.Background(), rec.Namespace, rec.ID, "op")
	if err != nil || r.Status != restart.StatusCanceled {
		t.Fatalf("cancel: %v %v", r, err)
	}
	final := drive(t, e, rec, nil)
	if final.Status != restart.StatusCanceled || len(fc.counts(false)) != 0 {
		t.Fatalf("canceled restart ran: %s", final.Status)
	}
}

func TestTransientFaults(t *testing.T) {
	for _, fault := range []string{"restart", "restart-lost", "read"} {
		t.Run(fault, func(t *testing.T) {
			fc := newFakeCluster("service", map[string]int{"web": 3})
			fc.faults[fault] = 2
			e, _ := newTestEngine(t, fc)
			final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true}), nil)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)", final.Status, final.Reason)
			}
			assertOnce(t, fc.counts(false), final)
		})
	}
	t.Run("stop-lost", func(t *testing.T) {
		fc := newFakeCluster("service", map[string]int{"web": 3})
		fc.faults["stop-lost"] = 2
		e, _ := newTestEngine(t, fc)
		final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true, Reschedule: true}), nil)
		if final.Status != restart.StatusSucceeded {
			t.Fatalf("status %s (%s)", final.Status, final.Reason)
		}
		assertOnce(t, fc.counts(true), final)
	})
}

func TestPlacementFailure(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 2})
	fc.placement["web"] = &cluster.PlacementFailure{EvalID: "eval-123456789", Group: "web", Reasons: []string{"No nodes were eligible for evaluation"}}
	e, _ := newTestEngine(t, fc)
	final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true, Reschedule: true}), nil)
	if final.Status != restart.StatusFailed || !final.Allocs[0].Unrecovered || !strings.Contains(final.Allocs[0].Error, "No nodes were eligible") {
		t.Fatalf("status %s alloc %+v", final.Status, final.Allocs[0])
	}
	if len(fc.counts(true)) != 1 {
		t.Fatalf("stopped %d allocations after an unrecoverable error", len(fc.counts(true)))
	}
}

func TestHealthyDeadline(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 1})
	fc.startDelay = time.Hour // the task never runs again
	e, _ := newTestEngine(t, fc)
	final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true, HealthyDeadline: 50 * time.Millisecond}), nil)
	if final.Status != restart.StatusFailed || !strings.Contains(final.Allocs[0].Error, "healthy deadline") {
		t.Fatalf("status %s alloc %+v", final.Status, final.Allocs[0])
	}
}

func TestTaskFailsAfterRestart(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 1})
	for id := range fc.allocs {
		fc.failStart[id] = true
	}
	e, _ := newTestEngine(t, fc)
	final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true}), nil)
	if final.Status != restart.StatusFailed || !strings.Contains(final.Allocs[0].Error, "failed after the restart") {
		t.Fatalf("status %s alloc %+v", final.Status, final.Allocs[0])
	}
}

func TestDeploymentMidRun(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 3})
	e, s := newTestEngine(t, fc)
	// A batch wait longer than lazyLinger, so that the wait is stored while it lasts.
	rec := planAndCreate(t, e, restart.Spec{BatchWait: 4 * lazyLinger})
	wait, _ := driveAsync(e, rec)
	waitStatus(t, s, rec, func(r *restart.Record) bool { return !r.NextBatchAt.IsZero() })
	fc.mu.Lock()
	fc.deployment = &cluster.Deployment{ID: "dep-123456", Status: "running"}
	fc.mu.Unlock()
	final, err := wait()
	if err != nil || final.Status != restart.StatusFailed || !strings.Contains(final.Reason, `Deployment "dep-1234" is "running"`) {
		t.Fatalf("final %s %q %v", final.Status, final.Reason, err)
	}
}

func TestMinHealthyTime(t *testing.T) {
	t.Run("stays up", func(t *testing.T) {
		fc := newFakeCluster("service", map[string]int{"web": 2})
		e, _ := newTestEngine(t, fc)
		final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true, MinHealthyTime: 20 * time.Millisecond}), nil)
		if final.Status != restart.StatusSucceeded {
			t.Fatalf("status %s (%s)", final.Status, final.Reason)
		}
	})
	t.Run("crashes within it", func(t *testing.T) {
		fc := newFakeCluster("service", map[string]int{"web": 1})
		fc.crashAfter = 5 * time.Millisecond
		e, _ := newTestEngine(t, fc)
		final := drive(t, e, planAndCreate(t, e, restart.Spec{Yes: true, MinHealthyTime: time.Minute}), nil)
		if final.Status != restart.StatusFailed || !strings.Contains(final.Allocs[0].Error, "failed after the restart") {
			t.Fatalf("status %s alloc %+v", final.Status, final.Allocs[0])
		}
	})
}

// TestAnswerWhileDetached answers a question no driver is waiting on; the next driver reads the
// answer from the record and goes on.
func TestAnswerWhileDetached(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 2})
	e, s := newTestEngine(t, fc)
	rec := planAndCreate(t, e, restart.Spec{BatchWaitAsk: true})
	wait, cancel := driveAsync(e, rec)
	waitStatus(t, s, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	cancel()
	if r, err := wait(); !errors.Is(err, context.Canceled) || r.Status != restart.StatusWaiting || r.Driver != "" {
		t.Fatalf("detach: %v, status %s, driver %q", err, r.Status, r.Driver)
	}
	if _, err := e.Answer(context.Background(), rec.Namespace, rec.ID, "y", "op"); err != nil {
		t.Fatal(err)
	}
	final := drive(t, e, rec, nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	assertOnce(t, fc.counts(false), final)
}

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
