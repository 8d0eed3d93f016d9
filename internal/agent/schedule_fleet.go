package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// startFleet creates the fleet of a fleet schedule's occurrence, pending: the agents' fleet
// runner drives it as it drives a fleet filed with `run -jobs ... -detach`. The jobs are
// selected now, with the agent's token, and fixed in the fleet; of them, only those of the
// schedule's home and of namespaces holding its member marker are kept (consentedJobs), and
// the agent writes the fleet's member markers there before the fleet. The fleet's ID derives
// from the schedule and the due time, so a fleet already there under it (another agent's,
// or ours before a crash) counts as started. As start does for a job, an error means
// nothing was decided (the agent is stopping, Nomad or the store failed) and the
// occurrence is tried again.
func (s *scheduleRunner) startFleet(ctx context.Context, sc *schedule.Schedule, due time.Time) (schedule.Outcome, error) {
	if s.a.fleets == nil {
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: "fleets are off in this agent: they need the Nomad store"}, nil
	}
	fleets := s.a.fleets.fleets
	id := schedule.OccurrenceID(sc.ID, due)
	started := schedule.Outcome{Result: schedule.ResultStarted, RestartID: id}
	if found, err := fleetThere(ctx, fleets, sc.Namespace, id); err != nil || found {
		return started, err
	}
	if out, skip, err := s.previousFleetRuns(ctx, fleets, sc); err != nil || skip {
		return out, err
	}
	target := sc.Fleet
	if home := fleetrun.HomeNamespace(target.Selection.Namespace); home != sc.Namespace {
		// A fleet's record lives in its home; a schedule elsewhere is not one run wrote, and
		// acting on it would let a writer of one namespace restart another's jobs.
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: fmt.Sprintf(
			"the schedule lives in namespace %q but selects jobs of namespace %q, whose fleets live in %q; remove it and schedule the fleet again with run -jobs",
			sc.Namespace, target.Selection.Namespace, home)}, nil
	}
	got, err := fleetrun.Select(ctx, s.a.cfg.Jobs, target.Selection, sc.RestartSpec(), target.Options)
	if out, decided, err := selectionOutcome(ctx, err); decided || err != nil {
		return out, err
	}
	kept, err := s.consentedJobs(ctx, sc, got.Jobs)
	switch {
	case err != nil:
		return schedule.Outcome{}, err
	case len(kept.jobs) == 0:
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: "no job to restart: " + kept.leftOut}, nil
	}
	rec := fleetrun.NewRecord(id, sc.Namespace, target.Selection, sc.RestartSpec(), target.Options, kept.jobs, got.Outside, s.a.cfg.Address, s.now())
	if len(rec.Events) == 1 { // NewRecord's "Fleet created": say which schedule made it
		rec.Events[0].Message = fmt.Sprintf("Fleet created by schedule %s for its occurrence due %s: %d jobs selected by -jobs %q",
			sc.ID, due.UTC().Format(time.RFC3339), len(kept.jobs), target.Selection.Filter)
		if kept.leftOut != "" {
			rec.Events[0].Message += "; " + kept.leftOut
		}
	}
	if kept.leftOut != "" {
		s.log.Warn("a fleet schedule's occurrence left out jobs", append(scheduleAttrs(sc), "reason", kept.leftOut)...)
	}
	if err := putFleetMembers(ctx, fleets, rec); err != nil {
		return fleetCreateOutcome(ctx, id, err)
	}
	return fleetCreateOutcome(ctx, id, fleets.Create(ctx, rec))
}

// fleetCreateOutcome is the occurrence's outcome once its fleet's markers and record were
// written (err nil) or not: a refusal that trying again cannot change (the record too
// large, the agent's token denied) fails the occurrence; an outage is tried again.
func fleetCreateOutcome(ctx context.Context, id string, err error) (schedule.Outcome, error) {
	started := schedule.Outcome{Result: schedule.ResultStarted, RestartID: id}
	var tooLarge *store.FleetTooLargeError
	switch {
	case err == nil, errors.Is(err, store.ErrExists):
		return started, nil // ErrExists: another agent created the occurrence's fleet meanwhile
	case errors.As(err, &tooLarge):
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: tooLarge.Error()}, nil
	case errors.Is(err, cluster.ErrPermissionDenied):
		return schedule.Outcome{Result: schedule.ResultFailed, Reason: "creating the occurrence's fleet: " + err.Error()}, nil
	case ctx.Err() != nil:
		return schedule.Outcome{}, ctx.Err()
	}
	return schedule.Outcome{}, fmt.Errorf("creating the occurrence's fleet %s: %w", id, err)
}

// fleetThere reports whether the fleet id exists in namespace.
func fleetThere(ctx context.Context, fleets store.Fleets, namespace, id string) (bool, error) {
	_, err := fleets.Get(ctx, namespace, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrFleetNotFound):
		return false, nil
	}
	return false, fmt.Errorf("looking for the occurrence's fleet %s: %w", id, err)
}

// previousFleetRuns skips the occurrence while the fleet of the schedule's previous one has
// not ended, as a job's occurrence is skipped while the job has a restart in progress: a
// slow fleet is not joined by a second one restarting the same jobs. The previous
// occurrence's fleet is the one it started, or the one it was skipped for: a fleet that
// outlasts two occurrences keeps the third from starting too.
func (s *scheduleRunner) previousFleetRuns(ctx context.Context, fleets store.Fleets, sc *schedule.Schedule) (schedule.Outcome, bool, error) {
	if (sc.LastResult != schedule.ResultStarted && sc.LastResult != schedule.ResultSkipped) || sc.LastRestartID == "" {
		return schedule.Outcome{}, false, nil
	}
	prev, err := fleets.Get(ctx, sc.Namespace, sc.LastRestartID)
	switch {
	case errors.Is(err, store.ErrFleetNotFound):
		return schedule.Outcome{}, false, nil // swept, or never there
	case err != nil:
		return schedule.Outcome{}, false, fmt.Errorf("reading the previous occurrence's fleet %s: %w", sc.LastRestartID, err)
	case prev.Status.Terminal():
		return schedule.Outcome{}, false, nil
	}
	return schedule.Outcome{Result: schedule.ResultSkipped, RestartID: prev.ID,
		Reason: fmt.Sprintf("fleet %s of the previous occurrence is still %s", prev.ID, prev.Status)}, true, nil
}

// selectionOutcome decides what a failed selection makes of the occurrence: nothing
// selected skips it, a selection Nomad refuses (a bad filter, a denied listing, options
// that cannot apply to a selected job) fails it with the reason. An outage or the agent
// stopping decides nothing: the error is returned and the occurrence tried again.
func selectionOutcome(ctx context.Context, err error) (schedule.Outcome, bool, error) {
	var empty *fleetrun.EmptySelectionError
	switch {
	case err == nil:
		return schedule.Outcome{}, false, nil
	case ctx.Err() != nil:
		return schedule.Outcome{}, false, ctx.Err()
	case errors.As(err, &empty):
		return schedule.Outcome{Result: schedule.ResultSkipped, Reason: empty.Error()}, true, nil
	case cluster.IsTransient(err):
		return schedule.Outcome{}, false, fmt.Errorf("selecting the fleet's jobs: %w", err)
	}
	return schedule.Outcome{Result: schedule.ResultFailed, Reason: "selecting the fleet's jobs: " + err.Error()}, true, nil
}

// scheduleAttrs are the log attributes naming a schedule and what it restarts.
func scheduleAttrs(sc *schedule.Schedule) []any {
	attrs := []any{"schedule", sc.ID, "namespace", sc.Namespace}
	if sc.IsFleet() {
		return append(attrs, "fleet_selection", sc.Fleet.Selection.Filter, "fleet_namespace", sc.Fleet.Selection.Namespace)
	}
	return append(attrs, "job", sc.JobID)
}
