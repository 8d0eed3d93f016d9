package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// putFleetMembers writes, with the user's token, the fleet's member marker in each
// namespace of its jobs other than its home, before the fleet is recorded: the consent
// that whoever drives it (the agent, with its own token) may restart those jobs. A token
// that may write the home's variables but not another namespace's is refused here, in one
// line, and no fleet is recorded; the markers written before the refusal are removed.
func putFleetMembers(ctx context.Context, fleets store.Fleets, rec *fleet.Record) error {
	members := store.MembershipsOf(rec)
	for i, ns := range sortedKeys(members) {
		if err := fleets.PutMember(ctx, ns, rec.ID, members[ns]); err != nil {
			deleteFleetMembers(ctx, fleets, rec.ID, sortedKeys(members)[:i])
			return fmt.Errorf("recording the fleet's consent to restart its jobs of namespace %q: %s", ns, fleetStoreErrorText(err))
		}
	}
	return nil
}

// deleteFleetMembers removes the member markers of a fleet that was not recorded after
// all, best effort: a marker left names no fleet, and a fleet's ID is never used again.
func deleteFleetMembers(ctx context.Context, fleets store.Fleets, id string, namespaces []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, ns := range namespaces {
		_ = fleets.DeleteMember(ctx, ns, id)
	}
}

// putScheduleMembers writes, with the user's token, a fleet schedule's member marker in
// each namespace of the jobs selected now other than its home: at each occurrence the
// agent restarts the jobs of those namespaces only where the marker is.
func putScheduleMembers(ctx context.Context, ss *schedule.Store, sc *schedule.Schedule, jobs []fleet.Job) error {
	home := sc.Namespace
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.Namespace != home {
			seen[j.Namespace] = true
		}
	}
	for _, ns := range sortedKeys(seen) {
		err := ss.PutMember(ctx, ns, sc.ID, schedule.MemberOf(sc))
		var perm *schedule.PermissionError
		switch {
		case errors.As(err, &perm):
			return fmt.Errorf("recording the schedule's consent to restart its jobs of namespace %q: %s", ns, perm.Error())
		case err != nil:
			return fmt.Errorf("recording the schedule's consent to restart its jobs of namespace %q: %w", ns, output.Flat(err))
		}
	}
	return nil
}
