package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// cancelUndriven ends, as canceled, a restart that no process drives and whose surge may be
// up, from the canceling process and under the lease it holds (so no driver runs meanwhile):
// each group is first scaled back by the same steps as a driver's finish, which decide from
// the group's count in Nomad whether a former request took effect, so each scale request
// reaches Nomad once. No allocation is restarted here; requests a dead driver left in flight
// are noted, as for any cancel of an undriven restart.
//
// When the scale-down cannot complete (ctx ends, the lease is lost, the record cannot be
// written), the restart stays canceling, with its surge state recorded; a second cancel, or
// the next driver, takes it up from there.
func (e *Engine) cancelUndriven(ctx context.Context, lease store.Lease, rec *restart.Record, by string) (*restart.Record, error) {
	lctx, cancel := whileHeld(ctx, lease)
	defer cancel()
	d := &driver{e: e, ns: rec.Namespace, id: rec.ID, rec: rec, changed: make(chan struct{}, 1),
		dirty: make(chan struct{}, 1), fresh: map[int]bool{},
		spec: normalizeSpec(rec.Spec), jobNS: rec.Namespace, jobID: rec.JobID, jobType: rec.JobType,
		log: e.log.With("restart", rec.ID, "job", rec.JobID, "canceling", true)}

	err := d.step(lctx, func(r *restart.Record) {
		d.eventLocked(restart.Event{Type: restart.EventDriver, Message: fmt.Sprintf(
			"No process drives the restart: %s scales its surge back before the cancel%s ends it", e.holder, byWho(by))})
	})
	if err == nil {
		err = d.surgeDown(lctx)
	}
	if err == nil {
		d.mu.Lock()
		msg := "Job restart canceled" + byWho(by) + surgeOutcome(d.rec) + inFlightNote(d.rec)
		d.mu.Unlock()
		err = d.finish(lctx, restart.StatusCanceled, "canceled"+byWho(by), restart.EventCanceled, msg)
	}
	switch {
	case err == nil, errors.Is(err, errTerminal):
		return d.snapshot(), nil
	case errors.Is(context.Cause(lctx), ErrLeaseLost):
		return d.snapshot(), &StepError{ID: rec.ID, Step: StepStatus,
			Err: fmt.Errorf("restart %s: cancel recorded, but %w while scaling its surge back", short(rec.ID), ErrLeaseLost)}
	}
	// Say in the record that the scale-down stopped and how to finish it; the lease is still
	// ours, so a short write of our own is safe.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer wcancel()
	if werr := d.step(wctx, func(r *restart.Record) {
		d.detached = true
		if r.Status.Terminal() {
			return
		}
		d.eventLocked(restart.Event{Type: restart.EventWarning, Message: fmt.Sprintf(
			"Cancel%s stopped while scaling the surge back (%s); run `nomad-restart cancel %s` again to finish it", byWho(by), oneLineErr(err), r.ID)})
	}); werr != nil {
		d.log.Warn("recording the interrupted cancel", "err", werr)
	}
	// The CLI words the step as the command to type: "...; run `nomad-restart cancel <id>`
	// again to finish it".
	return d.snapshot(), fmt.Errorf("%w to finish it", &StepError{ID: rec.ID, Step: StepCancelAgain,
		Err: fmt.Errorf("restart %s: cancel recorded, but scaling its surge back stopped: %w", short(rec.ID), err)})
}

// surgeOutcome says, for the cancel's event, where each group's surge ended ("" without
// one).
func surgeOutcome(r *restart.Record) string {
	var parts []string
	for _, s := range r.Surge {
		switch {
		case s.Phase == restart.SurgeLeft:
			parts = append(parts, fmt.Sprintf("group %q left at its count: %s", s.Group, s.Note))
		case s.Phase == restart.SurgeDown && s.Note != "":
			parts = append(parts, s.Note)
		case s.Phase == restart.SurgeDown:
			parts = append(parts, fmt.Sprintf("group %q is at its original count, %d", s.Group, s.From))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; surge over: " + strings.Join(parts, "; ")
}
