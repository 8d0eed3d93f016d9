package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// hookStore calls after with every record it stored.
type hookStore struct {
	store.Store
	after func(ctx context.Context, rec *restart.Record)
}

func (s *hookStore) Update(ctx context.Context, rec *restart.Record) error {
	err := s.Store.Update(ctx, rec)
	if err == nil && s.after != nil {
		s.after(ctx, rec)
	}
	return err
}

// detachAt drives rec from a process that stops right after the event matching at is
// persisted (as a driver that dies, or `run -detach`), leaving the restart undriven.
func (env *simEnv) detachAt(t *testing.T, rec *restart.Record, at string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var log eventLog
	sink := func(e restart.Event) {
		log.sink(e)
		if strings.Contains(e.Message, at) {
			cancel()
		}
	}
	if _, err := env.gateEngine(env.store, "dies:1").Drive(ctx, rec.Namespace, rec.ID, sink); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drive: %v, want stopped at %q\n%s", err, at, log.messages())
	}
}

func eventsText(r *restart.Record) string {
	var b strings.Builder
	for _, e := range r.Events {
		b.WriteString(e.Message)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCancelUndrivenSurge: `nomad-restart cancel` of a restart that no process drives, with
// its surge up (or its scale-up intent persisted and the request never sent), scales the
// group back to its count, once, before the restart ends canceled, and says so in its events.
func TestCancelUndrivenSurge(t *testing.T) {
	cases := []struct {
		name     string
		stopAt   string
		scaled   bool   // the scale-up reached Nomad
		outcome  string // in the canceled event
		wantStep string // a surge event of the cancel
	}{
		{name: "surge up", stopAt: `Surge allocations of group "web" are healthy`, scaled: true,
			outcome: `surge over: group "web" is at its original count, 1`, wantStep: `Scaling group "web" back to 1`},
		{name: "scale-up never sent", stopAt: `Scaling group "web" from 1 to 2`,
			outcome: `surge over: group "web" is at its original count, 1`, wantStep: `Group "web" was not scaled; its count stays 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := startSurgeSim(t, 1, "pass")
			rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1}))
			env.detachAt(t, rec, tc.stopAt)
			if tc.scaled && groupCount(t, env.client) != 2 {
				t.Fatalf("count %d before the cancel, want the surge's 2", groupCount(t, env.client))
			}

			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			final, err := env.gateEngine(env.store, "canceler:1").Cancel(ctx, rec.Namespace, rec.ID, "op")
			if err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			msgs := eventsText(final)
			if final.Status != restart.StatusCanceled || final.Driver != "" || final.SurgeOpen() {
				t.Fatalf("after cancel: status %s driver %q surge %+v, want canceled, undriven, surge over\n%s", final.Status, final.Driver, final.Surge, msgs)
			}
			if c := groupCount(t, env.client); c != 1 {
				t.Errorf("count %d after the cancel, want 1 restored", c)
			}
			if g := final.Surge[0]; g.Phase != restart.SurgeDown {
				t.Errorf("surge %+v, want down", g)
			}
			if a := final.Allocs[0]; a.State != restart.AllocPending {
				t.Errorf("planned allocation %s, want untouched by the cancel", a.State)
			}
			last := final.Events[len(final.Events)-1]
			if last.Type != restart.EventCanceled || !strings.Contains(last.Message, "canceled by op") || !strings.Contains(last.Message, tc.outcome) {
				t.Errorf("last event %s %q, want canceled by op saying %q", last.Type, last.Message, tc.outcome)
			}
			if !strings.Contains(msgs, tc.wantStep) {
				t.Errorf("no event %q in:\n%s", tc.wantStep, msgs)
			}
			if tc.scaled {
				checkSurgeEvents(t, env.client, final, 1, 2)
				if n := serving(t, env.client); n != 1 {
					t.Errorf("%d allocations serve after the cancel, want 1 (the surge's stopped)", n)
				}
			} else if evs := scaleEvents(t, env.client); len(evs) != 0 {
				t.Errorf("%d scaling events, want none (the scale-up was never sent)", len(evs))
			}
			stored, err := env.store.Get(ctx, rec.Namespace, rec.ID)
			if err != nil || stored.Status != restart.StatusCanceled {
				t.Fatalf("stored record: %v %v", stored, err)
			}
			// The lease was released: a later driver finds the restart ended, not held.
			if r, err := env.e.Drive(ctx, rec.Namespace, rec.ID, nil); err != nil || r.Status != restart.StatusCanceled {
				t.Errorf("Drive after the cancel: %v %v", r.Status, err)
			}
		})
	}
}

// TestCancelUndrivenSurgeHoldsLease: while the canceling process scales the surge back, it
// holds the restart's lease, so no driver can take the restart at the same time.
func TestCancelUndrivenSurgeHoldsLease(t *testing.T) {
	env := startSurgeSim(t, 1, "pass")
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1}))
	env.detachAt(t, rec, `Surge allocations of group "web" are healthy`)

	var mu sync.Mutex
	checked := 0
	var intruders []error
	hs := &hookStore{Store: env.store, after: func(ctx context.Context, r *restart.Record) {
		if len(r.Surge) == 0 || r.Surge[0].Phase != restart.SurgeScalingDown {
			return
		}
		_, err := env.gateEngine(env.store, "intruder:1").Drive(ctx, r.Namespace, r.ID, nil)
		mu.Lock()
		checked++
		if !errors.Is(err, store.ErrLeaseHeld) {
			intruders = append(intruders, err)
		}
		mu.Unlock()
	}}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	final, err := env.gateEngine(hs, "canceler:1").Cancel(ctx, rec.Namespace, rec.ID, "op")
	if err != nil || final.Status != restart.StatusCanceled {
		t.Fatalf("Cancel: %v %v", final, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if checked == 0 || len(intruders) > 0 {
		t.Errorf("%d drives tried during the scale-down, these not refused with ErrLeaseHeld: %v", checked, intruders)
	}
	checkSurgeEvents(t, env.client, final, 1, 2)
}

// TestCancelUndrivenSurgeInterrupted: a canceling process stopped right after it persisted
// the scale-down intent leaves the restart canceling, undriven, with the way to finish it in
// its events; a second cancel finishes it, and the scale-down reaches Nomad once.
func TestCancelUndrivenSurgeInterrupted(t *testing.T) {
	env := startSurgeSim(t, 1, "pass")
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1}))
	env.detachAt(t, rec, `Surge allocations of group "web" are healthy`)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	hs := &hookStore{Store: env.store, after: func(_ context.Context, r *restart.Record) {
		if len(r.Surge) > 0 && r.Surge[0].Phase == restart.SurgeScalingDown {
			stop() // the canceling process dies (Ctrl-C) before its request
		}
	}}
	_, err := env.gateEngine(hs, "canceler:1").Cancel(cctx, rec.Namespace, rec.ID, "op")
	// The engine names the step, the CLI words it as `nomad-restart cancel <id>`.
	var step *StepError
	if err == nil || !errors.As(err, &step) || step.Step != StepCancelAgain || step.ID != rec.ID {
		t.Fatalf("interrupted Cancel: %v, want an error saying to cancel again", err)
	}
	mid, err := env.store.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if mid.Status.Terminal() || mid.Control.Intent != restart.IntentCancel || mid.Driver != "" || !mid.SurgeOpen() {
		t.Fatalf("after the interrupted cancel: status %s intent %s driver %q surge %+v; want canceling, undriven, surge open", mid.Status, mid.Control.Intent, mid.Driver, mid.Surge)
	}
	if msgs := eventsText(mid); !strings.Contains(msgs, "stopped while scaling the surge back") {
		t.Errorf("no event about the interrupted cancel in:\n%s", msgs)
	}

	final, err := env.gateEngine(env.store, "canceler:2").Cancel(ctx, rec.Namespace, rec.ID, "op")
	if err != nil || final.Status != restart.StatusCanceled {
		t.Fatalf("second Cancel: %v %v", final, err)
	}
	if c := groupCount(t, env.client); c != 1 {
		t.Errorf("count %d, want 1 restored", c)
	}
	checkSurgeEvents(t, env.client, final, 1, 2)
}
