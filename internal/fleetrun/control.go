package fleetrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// firstToken takes the control bell's first token, before the fleet is read, so that no
// operator's change stored after the read is missed.
func (r *run) firstToken(ctx context.Context) (uint64, error) {
	_, token, err := r.d.cfg.Fleets.WatchControl(ctx, r.ns, r.id, 0)
	if err != nil {
		return 0, fmt.Errorf("following fleet %s's steering: %w", short(r.id), err)
	}
	return token, nil
}

// watchControl rings the loop each time an operator may have changed the fleet's Control.
func (r *run) watchControl(ctx context.Context, token uint64) {
	policy := cluster.DefaultRetryPolicy()
	policy.MaxElapsed = 0 // until ctx ends: the fleet must not stop hearing its operators
	backoff := cluster.NewBackoff(policy)
	for ctx.Err() == nil {
		_, next, err := r.d.cfg.Fleets.WatchControl(ctx, r.ns, r.id, token)
		if err != nil {
			r.d.log.Warn("following the fleet's steering", "fleet", r.id, "err", err)
			if !backoff.Wait(ctx) {
				return
			}
			continue
		}
		backoff.Reset()
		token = next
		select {
		case r.rung <- struct{}{}:
		default: // a ring is pending already
		}
	}
}

// Pause stops the fleet from starting jobs and pauses its running children after their
// batch. It returns the fleet as stored.
func (d *Driver) Pause(ctx context.Context, namespace, id, by string) (*fleet.Record, error) {
	return d.setIntent(ctx, namespace, id, by, restart.IntentPause)
}

// Resume lets a paused fleet start jobs again and resumes the children it paused. The
// caller then calls Run if no one drives the fleet (Run returns store.ErrLeaseHeld when
// someone does, and that driver goes on by itself).
func (d *Driver) Resume(ctx context.Context, namespace, id, by string) (*fleet.Record, error) {
	return d.setIntent(ctx, namespace, id, by, restart.IntentRun)
}

// Cancel stops the fleet: no job starts any more and its running children are canceled.
// A fleet no one drives is wound down by this call, under the fleet's lease, until its
// children ended (at once for children no one drives either).
func (d *Driver) Cancel(ctx context.Context, namespace, id, by string) (*fleet.Record, error) {
	rec, err := d.setIntent(ctx, namespace, id, by, restart.IntentCancel)
	if err != nil {
		return nil, err
	}
	ended, err := d.Run(ctx, namespace, id, nil)
	if errors.Is(err, store.ErrLeaseHeld) {
		return rec, nil // its driver obeys the intent
	}
	if err != nil {
		return rec, fmt.Errorf("fleet %s: cancel recorded, but winding it down failed: %w", short(id), err)
	}
	return ended, nil
}

func (d *Driver) setIntent(ctx context.Context, namespace, id, by string, intent restart.Intent) (*fleet.Record, error) {
	return store.Mutate(ctx, d.cfg.Fleets, namespace, id, func(rec *fleet.Record) error {
		return steer.SetIntent(steer.FleetHead(rec), &rec.Control, intent, by)
	})
}

// Answer answers the fleet's own question when it asks one (its failure budget spent);
// otherwise it gives the answer to each running child that waits for one. It returns the
// restarts it answered (none for the fleet's own question).
func (d *Driver) Answer(ctx context.Context, namespace, id, answer, by string) ([]string, error) {
	rec, err := d.cfg.Fleets.Get(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	if rec.Question != nil && rec.Status == restart.StatusWaiting {
		return nil, d.answerFleet(ctx, rec, answer, by)
	}
	if rec.Status.Terminal() {
		return nil, &steer.EndedError{Kind: steer.KindFleet, ID: rec.ID, Status: rec.Status, Verb: "answer"}
	}
	var answered []string
	for _, j := range rec.Jobs {
		if j.Status != fleet.JobRunning || j.RestartID == "" {
			continue
		}
		child, err := d.cfg.Restarts.Get(ctx, j.Namespace, j.RestartID)
		if err != nil || child.Status != restart.StatusWaiting {
			continue
		}
		if _, err := d.cfg.Engine.Answer(ctx, j.Namespace, j.RestartID, answer, by); err != nil {
			return answered, fmt.Errorf("answering restart %s of job %q: %w", short(j.RestartID), j.JobID, err)
		}
		answered = append(answered, j.RestartID)
	}
	if len(answered) == 0 {
		return nil, fmt.Errorf("%w: neither fleet %s nor any of its running jobs waits for one", steer.ErrNoQuestion, short(rec.ID))
	}
	return answered, nil
}

func (d *Driver) answerFleet(ctx context.Context, rec *fleet.Record, answer, by string) error {
	qid := rec.Question.ID
	_, err := store.Mutate(ctx, d.cfg.Fleets, rec.Namespace, rec.ID, func(r *fleet.Record) error {
		if r.Question == nil || r.Question.ID != qid {
			return fmt.Errorf("%w: fleet %s's question was answered meanwhile", steer.ErrNoQuestion, short(r.ID))
		}
		return steer.SetAnswer(steer.FleetHead(r), &r.Control, answer, by)
	})
	return err
}

// Steerer is the fleet driver as operators steer fleets (steer.Steerer).
func (d *Driver) Steerer() steer.Steerer { return steer.Adapt[*fleet.Record, []string](d) }
