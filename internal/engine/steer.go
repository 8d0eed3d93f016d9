package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// setIntent writes the operator's intent into Control (no lease needed).
func (e *Engine) setIntent(ctx context.Context, namespace, id, by string, intent restart.Intent) (*restart.Record, error) {
	return e.writeControl(ctx, namespace, id, func(h steer.Head, c *restart.Control) error {
		return steer.SetIntent(h, c, intent, by)
	}, "intent set", "intent", intent, "by", by)
}

// writeControl writes an operator's steering into the restart's Control by the steer
// package's rules (set), and logs it as done with the restart's ID and attrs.
func (e *Engine) writeControl(ctx context.Context, namespace, id string, set func(steer.Head, *restart.Control) error, done string, attrs ...any) (*restart.Record, error) {
	rec, err := store.Mutate(ctx, e.store, namespace, id, func(r *restart.Record) error {
		return set(steer.RestartHead(r), &r.Control)
	})
	if err != nil {
		return nil, err
	}
	e.log.Info(done, append([]any{"restart", id}, attrs...)...)
	return rec, nil
}

// Pause asks the driver to finish the batch in flight and then hold.
func (e *Engine) Pause(ctx context.Context, namespace, id, by string) (*restart.Record, error) {
	return e.setIntent(ctx, namespace, id, by, restart.IntentPause)
}

// Resume sets the intent run; the caller then calls Drive if no one holds the lease (Drive
// returns store.ErrLeaseHeld when someone does, and that driver resumes by itself).
func (e *Engine) Resume(ctx context.Context, namespace, id, by string) (*restart.Record, error) {
	return e.setIntent(ctx, namespace, id, by, restart.IntentRun)
}

// Cancel asks the driver to stop starting new work and end the restart as canceled once the
// requests in flight are recorded. A restart no driver holds (pending, detached, or whose driver
// died) is ended by this call, under the restart's lease: at once, or, when its surge (-surge)
// may be up, once each group is scaled back to its original count (see cancelUndriven). The
// record returned is the stored one; its events say what happened.
func (e *Engine) Cancel(ctx context.Context, namespace, id, by string) (*restart.Record, error) {
	rec, err := e.setIntent(ctx, namespace, id, by, restart.IntentCancel)
	if err != nil {
		return nil, err
	}
	lease, err := e.store.AcquireLease(ctx, namespace, id, e.holder)
	if errors.Is(err, store.ErrLeaseHeld) {
		return rec, nil // the driver obeys the intent
	}
	if err != nil {
		return rec, fmt.Errorf("restart %s: cancel recorded, but its lease could not be checked: %w", short(id), err)
	}
	defer e.release(ctx, lease, id)
	// Read again under the lease: the driver that held it until now may have ended the
	// restart, or moved its surge on.
	cur, err := e.store.Get(ctx, namespace, id) // the store retries what passes
	if err != nil {
		return rec, &StepError{ID: id, Step: StepCancelAgain,
			Err: fmt.Errorf("restart %s: cancel recorded, but the restart could not be read again: %w", short(id), err)}
	}
	if cur.Status.Terminal() {
		return cur, nil
	}
	if cur.SurgeOpen() {
		return e.cancelUndriven(ctx, lease, cur, by)
	}
	return store.Mutate(ctx, e.store, namespace, id, func(r *restart.Record) error {
		if r.Status.Terminal() {
			return nil
		}
		r.Status, r.Reason, r.Question = restart.StatusCanceled, "canceled"+byWho(by), nil
		r.EndTime = e.now()
		r.AppendEvent(restart.Event{Time: e.now(), Type: restart.EventCanceled, Message: "Job restart canceled" + byWho(by) + inFlightNote(r)})
		return nil
	})
}

// inFlightNote names the allocations whose request was in flight when the restart's last
// driver stopped, for the cancel's event ("" when none).
func inFlightNote(r *restart.Record) string {
	inFlight := 0
	for _, a := range r.Allocs {
		if a.State == restart.AllocRestarting || a.State == restart.AllocWaiting {
			inFlight++
		}
	}
	if inFlight == 0 {
		return ""
	}
	return fmt.Sprintf("; %s had a request in flight when its driver stopped and may have been restarted", plural(inFlight, "allocation"))
}

// Answer answers the question the restart waits on, validated with restart.ParseAnswer. An
// empty answer takes the question's default.
func (e *Engine) Answer(ctx context.Context, namespace, id, answer, by string) (*restart.Record, error) {
	return e.writeControl(ctx, namespace, id, func(h steer.Head, c *restart.Control) error {
		return steer.SetAnswer(h, c, answer, by)
	}, "answer recorded", "answer", answer, "by", by)
}

// Steerer is the engine as operators steer restarts (steer.Steerer).
func (e *Engine) Steerer() steer.Steerer { return steer.Adapt[*restart.Record, *restart.Record](e) }
