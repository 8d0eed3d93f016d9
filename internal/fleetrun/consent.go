package fleetrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// consentFailure says why the fleet may not restart job, "" when it may. A fleet's record
// lives in its home namespace, where whoever may write nomad-restart's variables could
// list any job; the driver (often the agent, with a broad token) must not restart a job
// of another namespace on that say alone. So a job outside the home needs the fleet's
// member marker in its own namespace, naming it: written there by a token with rights
// there (`run -jobs` with the user's token, the agent for a schedule that proved consent).
func (r *run) consentFailure(ctx context.Context, rec *fleet.Record, job fleet.Job) string {
	home, ns := cmp.Or(rec.Namespace, "default"), cmp.Or(job.Namespace, "default")
	if ns == home {
		return ""
	}
	m, err := r.membership(ctx, ns)
	var problem string
	switch {
	case errors.Is(err, store.ErrNoMember):
		problem = "holds no member marker of the fleet"
	case err != nil:
		problem = "could not be checked for the fleet's member marker (" + oneLine(err.Error()) + ")"
	case m.Home != home:
		problem = fmt.Sprintf("holds a member marker of the fleet for home namespace %q, not %q", m.Home, home)
	case !m.Has(job.JobID):
		problem = "holds a member marker of the fleet that does not name the job"
	default:
		return ""
	}
	return fmt.Sprintf("not restarted: namespace %q %s at variable %q, the consent a fleet of namespace %q needs to restart its jobs; "+
		"file the fleet again with a token that may write nomad-restart variables in namespace %q",
		ns, problem, r.d.cfg.Fleets.MemberPath(rec.ID), home, ns)
}

// membership reads the fleet's member marker in namespace once per drive: an answer
// (the marker, none, or a denial) is kept; a failure to read is not, so that the next job
// of the namespace reads it again after an outage.
func (r *run) membership(ctx context.Context, namespace string) (store.Membership, error) {
	r.membersM.Lock()
	defer r.membersM.Unlock()
	if got, ok := r.members[namespace]; ok {
		return got.m, got.err
	}
	m, err := r.d.cfg.Fleets.Member(ctx, namespace, r.id)
	if err == nil || errors.Is(err, store.ErrNoMember) || errors.Is(err, cluster.ErrPermissionDenied) {
		r.members[namespace] = memberRead{m: m, err: err}
	}
	return m, err
}

// memberRead is a namespace's member marker as read by this drive.
type memberRead struct {
	m   store.Membership
	err error
}
