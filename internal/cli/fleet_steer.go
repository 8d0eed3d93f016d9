package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// fleetEndedError refuses to steer a fleet that has ended.
func fleetEndedError(rec *fleet.Record, verb string, verbose bool) error {
	return usageErrorf("fleet %s has already ended (%s); there is nothing to %s; start a new one with `nomad-restart run %s`",
		shortID(rec.ID, verbose), rec.Status, verb, describeSelection(rec.Selection))
}

// fleetSteerError is one line for a steering the fleet driver refused or could not store.
func fleetSteerError(cmd string, rec *fleet.Record, err error, verbose bool) error {
	var ended *steer.EndedError
	if errors.As(err, &ended) {
		return fleetEndedError(&fleet.Record{Fleet: fleet.Fleet{ID: ended.ID, Status: ended.Status}, Selection: rec.Selection}, cmd, verbose)
	}
	return fmt.Errorf("%s fleet %s: %s", cmd, shortID(rec.ID, verbose), fleetStoreErrorText(err))
}

// steerFleet is `pause` or `cancel` of a fleet: one write of its Control; a cancel of a
// fleet no process drives also winds it down here, until its running restarts ended.
func (a *app) steerFleet(ctx context.Context, cmd string, ft *fleetTarget, verbose bool) error {
	rec := ft.rec
	if rec.Status.Terminal() {
		return fleetEndedError(rec, cmd, verbose)
	}
	drv := ft.ses.fleetDriver(1, false)
	var out *fleet.Record
	var err error
	if cmd == "pause" {
		out, err = drv.Pause(ctx, rec.Namespace, rec.ID, a.by())
	} else {
		out, err = drv.Cancel(ctx, rec.Namespace, rec.ID, a.by())
	}
	if err != nil {
		return fleetSteerError(cmd, rec, err, verbose)
	}
	p := a.printer(verbose, false)
	id := shortID(rec.ID, verbose)
	if cmd == "pause" {
		p.header(a.now(), fmt.Sprintf("Fleet %s: pause requested: no new job starts, and its running restarts hold after their batch; continue it with `nomad-restart resume %s` (status: %s)", id, id, out.Status))
	} else {
		p.header(a.now(), fmt.Sprintf("Fleet %s: cancel requested: no new job starts, and its running restarts are canceled (status: %s)", id, out.Status))
	}
	if !out.Status.Terminal() {
		a.noteFleetDriver(ctx, ft, cmd, verbose)
	}
	return nil
}

// noteFleetDriver says when a recorded pause or cancel takes effect: at once when a driver
// holds the fleet (it is woken by the change), or at the next resume.
func (a *app) noteFleetDriver(ctx context.Context, ft *fleetTarget, cmd string, verbose bool) {
	holder, state := a.fleetLease(ctx, ft)
	id := shortID(ft.rec.ID, verbose)
	switch {
	case state == leaseHeld:
		fmt.Fprintf(a.stdout, "    Its driver, %s, applies the %s\n", holder, cmd)
	case state == leaseFree && cmd == "pause":
		fmt.Fprintf(a.stdout, "    No process drives fleet %s now: it stays paused until `nomad-restart resume %s`\n", id, id)
	}
}

// answerFleet is `answer <fleet-id>`: the fleet's own question (its failure budget spent),
// else the question of each of its running restarts that waits for one.
func (a *app) answerFleet(ctx context.Context, ft *fleetTarget, text string, verbose bool) error {
	rec := ft.rec
	id := shortID(rec.ID, verbose)
	if rec.Status.Terminal() {
		return fleetEndedError(rec, "answer", verbose)
	}
	if rec.Status == restart.StatusWaiting && rec.Question != nil {
		if _, err := restart.ParseAnswer(rec.Question, text); err != nil {
			return usageErrorf("Invalid answer %q to %q: answer yes or no", text, oneLine(rec.Question.Text))
		}
	}
	answered, err := ft.ses.fleetDriver(1, false).Answer(ctx, rec.Namespace, rec.ID, text, a.by())
	switch {
	case errors.Is(err, steer.ErrNoQuestion):
		return usageErrorf("fleet %s is not waiting for an answer, nor is any of its running restarts (status: %s); there is nothing to answer; see `nomad-restart status %s`", id, rec.Status, id)
	case err != nil:
		return fmt.Errorf("answering fleet %s: %s", id, oneLine(errorText(err)))
	}
	p := a.printer(verbose, false)
	if len(answered) == 0 {
		p.header(a.now(), fmt.Sprintf("Answered %q to fleet %s", text, id))
		return nil
	}
	ids := make([]string, len(answered))
	for i, rid := range answered {
		ids[i] = shortID(rid, verbose)
	}
	p.header(a.now(), fmt.Sprintf("Answered %q to %s of fleet %s: %s", text, plural(len(ids), "restart", "restarts"), id, strings.Join(ids, ", ")))
	return nil
}

// resumeFleet is `resume <fleet-id>`: set the fleet to run and, unless -detach, drive it
// here; when another process drives it, follow it and take over once its lease is free.
func (a *app) resumeFleet(ctx context.Context, ft *fleetTarget, verbose, detach, jsonOut bool) error {
	rec := ft.rec
	if rec.Status.Terminal() {
		return fleetEndedError(rec, "resume", verbose)
	}
	drv := ft.ses.fleetDriver(rec.Options.MaxParallelJobs, true)
	out, err := drv.Resume(ctx, rec.Namespace, rec.ID, a.by())
	if err != nil {
		return fleetSteerError("resume", rec, err, verbose)
	}
	p := a.printer(verbose, jsonOut)
	id := shortID(rec.ID, verbose)
	if detach {
		if jsonOut {
			p.jsonLine(newFleetEntry(out))
		} else {
			p.header(a.now(), fmt.Sprintf("Fleet %s set to run (status: %s); a driver continues it: `nomad-restart resume %s` without -detach", id, out.Status, id))
		}
		return nil
	}
	if !jsonOut {
		c := out.Counts()
		p.header(a.now(), fmt.Sprintf("Resuming fleet %s: %d of %s left, at most %d at once", id, c[fleet.JobPending]+c[fleet.JobRunning], plural(len(out.Jobs), "job", "jobs"), out.Options.MaxParallelJobs))
	}
	return a.driveOrTakeOverFleet(ctx, p, drv, &fleetTarget{ses: ft.ses, rec: out})
}

// driveOrTakeOverFleet drives the fleet here; when another process holds its lease, it
// follows the fleet and takes over as soon as the lease is free (its driver let go, or
// died and its lease expired).
func (a *app) driveOrTakeOverFleet(ctx context.Context, p *printer, drv *fleetrun.Driver, ft *fleetTarget) error {
	said := false
	for {
		ended, err := a.runFleetHere(ctx, p, ft.ses.fleetStore(), drv, ft.rec)
		if !errors.Is(err, store.ErrLeaseHeld) {
			return a.fleetFinish(ctx, p, ft.rec.ID, ended, err)
		}
		if cur, gerr := ft.ses.fleetStore().Get(ctx, ft.rec.Namespace, ft.rec.ID); gerr == nil {
			ft = &fleetTarget{ses: ft.ses, rec: cur}
		}
		if !said && !p.json {
			said = true
			p.header(a.now(), a.waitingForFleetDriver(ctx, ft, p.verbose))
		}
		wctx, stop := context.WithCancel(ctx)
		err = a.followFleet(wctx, p, ft, true, a.watchFleetLease(wctx, ft))
		stop()
		if !errors.Is(err, errLeaseFree) {
			return err
		}
		if !p.json {
			p.header(a.now(), fmt.Sprintf("Fleet %s: its lease is free; taking over", shortID(ft.rec.ID, p.verbose)))
		}
	}
}

// waitingForFleetDriver is said once when resume finds another driver holding the fleet.
func (a *app) waitingForFleetDriver(ctx context.Context, ft *fleetTarget, verbose bool) string {
	id := shortID(ft.rec.ID, verbose)
	who, err := ft.ses.fleetStore().LeaseHolder(ctx, ft.rec.Namespace, ft.rec.ID)
	if err != nil || who == "" {
		who = "another process"
	}
	ttl, delay := ft.ses.fleetStore().LeaseExpiry()
	if ttl == 0 {
		return fmt.Sprintf("Fleet %s is driven by %s; waiting for it to finish or let go, to take over", id, who)
	}
	return fmt.Sprintf("Fleet %s is driven by %s; waiting for it, or for its lease to expire (up to 2×TTL + lock delay, about %s), to take over",
		id, who, (2*ttl + delay).Round(time.Second))
}

// watchFleetLease probes the fleet's lease until it is free, then closes the returned
// channel. Failing probes count as held: the follow goes on.
func (a *app) watchFleetLease(ctx context.Context, ft *fleetTarget) <-chan struct{} {
	ttl, _ := ft.ses.fleetStore().LeaseExpiry()
	return untilLeaseFree(ctx, ttl, func() (bool, error) {
		return store.LeaseFree(ctx, ft.ses.fleetStore(), ft.rec.Namespace, ft.rec.ID, a.by())
	})
}
