package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// consented is a fleet schedule's selection cut to the namespaces that consent to it.
type consented struct {
	jobs []fleet.Job
	// leftOut says which namespaces' jobs were left out and why, "" when none was.
	leftOut string
}

// consentedJobs keeps, of the jobs the agent selected with its own token for a fleet
// schedule's occurrence, those of the schedule's home and of the namespaces holding the
// schedule's member marker for its home and filter. The schedule was written by someone who
// may write variables in its home; only the marker, which a token with rights in the other
// namespace wrote, says that they may also restart that namespace's jobs. A marker that
// cannot be read for a passing reason (an outage) is an error: the occurrence is tried again.
func (s *scheduleRunner) consentedJobs(ctx context.Context, sc *schedule.Schedule, jobs []fleet.Job) (consented, error) {
	want := schedule.MemberOf(sc)
	verdicts := map[string]string{} // namespace -> why it is left out ("" : it consents)
	for _, j := range jobs {
		if _, done := verdicts[j.Namespace]; done || j.Namespace == want.Home {
			continue
		}
		m, err := s.store.Member(ctx, j.Namespace, sc.ID)
		switch {
		case errors.Is(err, schedule.ErrNoMember):
			verdicts[j.Namespace] = "no member marker"
		case errors.Is(err, cluster.ErrPermissionDenied):
			verdicts[j.Namespace] = "a member marker the agent may not read"
		case err != nil:
			return consented{}, fmt.Errorf("reading the member marker of schedule %s in namespace %q: %w", sc.ID, j.Namespace, err)
		case m != want:
			verdicts[j.Namespace] = fmt.Sprintf("a member marker for another selection (home %q, -jobs %q)", m.Home, m.Filter)
		default:
			verdicts[j.Namespace] = ""
		}
	}
	out := consented{}
	dropped := map[string]int{}
	for _, j := range jobs {
		if verdicts[j.Namespace] == "" {
			out.jobs = append(out.jobs, j)
		} else {
			dropped[j.Namespace]++
		}
	}
	out.leftOut = leftOutReason(s.store.MemberPath(sc.ID), dropped, verdicts)
	return out, nil
}

// leftOutReason says, in one line, which namespaces' jobs an occurrence left out and how
// to include them.
func leftOutReason(path string, dropped map[string]int, verdicts map[string]string) string {
	if len(dropped) == 0 {
		return ""
	}
	var parts []string
	for _, ns := range slices.Sorted(maps.Keys(dropped)) {
		parts = append(parts, fmt.Sprintf("namespace %q (%d jobs: %s)", ns, dropped[ns], verdicts[ns]))
	}
	return fmt.Sprintf("left out the jobs of %s: a schedule restarts jobs outside its home namespace only where its member marker %q consents; "+
		"schedule the fleet again with a token that may write nomad-restart variables in those namespaces",
		strings.Join(parts, ", "), path)
}

// putFleetMembers writes the fleet's member markers in its jobs' namespaces other than
// its home, with the agent's token: the schedule's markers proved consent there, and the
// fleet's driver checks the fleet's own (fleetrun).
func putFleetMembers(ctx context.Context, fleets store.Fleets, rec *fleet.Record) error {
	for ns, m := range store.MembershipsOf(rec) {
		if err := fleets.PutMember(ctx, ns, rec.ID, m); err != nil {
			return fmt.Errorf("writing the member marker of fleet %s in namespace %q: %w", rec.ID, ns, err)
		}
	}
	return nil
}
