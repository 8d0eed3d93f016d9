package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// fleetSubject is a fleet found by ID, with the session it lives in.
type fleetSubject struct {
	ses session
	rec *fleet.Record
}

func (s *fleetSubject) head() steer.Head { return steer.FleetHead(s.rec) }

func (s *fleetSubject) name(verbose bool) string { return "fleet " + output.ShortID(s.rec.ID, verbose) }

func (s *fleetSubject) title(verbose bool) string { return s.name(verbose) }

// driverName is "": who drives a fleet is its lease's holder alone.
func (s *fleetSubject) driverName() string { return "" }

func (s *fleetSubject) refresh(ctx context.Context) {
	if cur, err := s.ses.fleetStore().Get(ctx, s.rec.Namespace, s.rec.ID); err == nil {
		s.rec = cur
	}
}

func (s *fleetSubject) runAgain() string {
	return "nomad-restart run " + describeSelection(s.rec.Selection)
}

func (s *fleetSubject) storeErrorText(err error) string { return fleetStoreErrorText(err) }

// steerer steers the fleet without driving it (a cancel of a fleet no process drives winds
// it down here, as a driver would).
func (s *fleetSubject) steerer() steer.Steerer { return s.ses.fleetDriver(1, false).Steerer() }

func (s *fleetSubject) lease() leaseOf { return leaseIn(s.ses.fleetStore(), s.rec.Namespace, s.rec.ID) }

func (s *fleetSubject) steered(cmd string, h steer.Head, verbose bool) string {
	id := output.ShortID(h.ID, verbose)
	if cmd == "pause" {
		return fmt.Sprintf("Fleet %s: pause requested: no new job starts, and its running restarts hold after their batch; continue it with `nomad-restart resume %s` (status: %s)", id, id, h.Status)
	}
	return fmt.Sprintf("Fleet %s: cancel requested: no new job starts, and its running restarts are canceled (status: %s)", id, h.Status)
}

// noteDriver says when a recorded pause or cancel takes effect: at once when a driver holds
// the fleet (it is woken by the change), or at the next resume.
func (s *fleetSubject) noteDriver(ctx context.Context, a *app, cmd string, verbose bool) {
	l := s.lease()
	id := output.ShortID(s.rec.ID, verbose)
	switch l.state(ctx, a.by()) {
	case leaseHeld:
		holder, _ := l.holder(ctx)
		if holder == "" {
			holder = "another process"
		}
		fmt.Fprintf(a.stdout, "    Its driver, %s, applies the %s\n", holder, cmd)
	case leaseFree:
		if cmd == "pause" {
			fmt.Fprintf(a.stdout, "    No process drives fleet %s now: it stays paused until `nomad-restart resume %s`\n", id, id)
		}
	}
}

// resume sets the fleet to run and, unless detach, drives it here with its children; when
// another process drives it, it follows the fleet and takes over once its lease is free.
func (s *fleetSubject) resume(ctx context.Context, a *app, p *output.Printer, detach bool) error {
	drv := s.ses.fleetDriver(s.rec.Options.MaxParallelJobs, true)
	out, err := drv.Resume(ctx, s.rec.Namespace, s.rec.ID, a.by())
	if err != nil {
		return steerError(s, "resume", err, p.Verbose)
	}
	id := output.ShortID(out.ID, p.Verbose)
	if detach {
		reportSetToRun(a, p, newFleetEntry(out),
			fmt.Sprintf("Fleet %s set to run (status: %s); a driver continues it: `nomad-restart resume %s` without -detach", id, out.Status, id))
		return nil
	}
	if !p.JSON {
		c := out.Counts()
		p.Header(a.now(), fmt.Sprintf("Resuming fleet %s: %d of %s left, at most %d at once", id, c[fleet.JobPending]+c[fleet.JobRunning], output.Plural(len(out.Jobs), "job", "jobs"), out.Options.MaxParallelJobs))
	}
	return a.driveOrTakeOverFleet(ctx, p, drv, &fleetSubject{ses: s.ses, rec: out})
}

func (s *fleetSubject) show(ctx context.Context, a *app, verbose bool) { a.printFleet(ctx, s, verbose) }

func (s *fleetSubject) entry() any { return newFleetEntry(s.rec) }

// attach follows the fleet and its running restarts until it ends. Ctrl-C stops following;
// the fleet goes on.
func (s *fleetSubject) attach(ctx context.Context, a *app, p *output.Printer) error {
	rec := s.rec
	if !p.JSON {
		id := output.ShortID(rec.ID, p.Verbose)
		p.Header(a.now(), fmt.Sprintf("Attached to fleet %s (status: %s, %s)", id, rec.Status, fleetJobsShort(rec.Fleet)))
		if !rec.Status.Terminal() && s.lease().state(ctx, a.by()) == leaseFree {
			p.Detail(a.now(), fmt.Sprintf("No process drives this fleet now; continue it with `nomad-restart resume %s`", id))
		}
	}
	return a.followFleet(ctx, p, s, false, nil)
}

// describeSelection is a fleet's selection as the options that made it.
func describeSelection(sel fleet.Selection) string {
	return fmt.Sprintf("-namespace '%s' -jobs '%s'", sel.Namespace, sel.Filter)
}

// answeredFleet words an answer a fleet took: its own question, or its restarts'.
func answeredFleet(text, id string, restarts []string, verbose bool) string {
	if len(restarts) == 0 {
		return fmt.Sprintf("Answered %q to fleet %s", text, id)
	}
	ids := make([]string, len(restarts))
	for i, rid := range restarts {
		ids[i] = output.ShortID(rid, verbose)
	}
	return fmt.Sprintf("Answered %q to %s of fleet %s: %s", text, output.Plural(len(ids), "restart", "restarts"), id, strings.Join(ids, ", "))
}
