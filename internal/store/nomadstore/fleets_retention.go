package nomadstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
)

// prune deletes the namespace's finished fleets beyond the newest keepEnded (with their
// bells and leases), so that Nomad Variables do not grow with every fleet ever run. It
// runs when a fleet is created (created, which it leaves alone) and is best effort: a
// failure leaves fleets for the next prune.
//
// A namespace holds at most keepEnded finished fleets, its active ones and the one just
// created, so each prune reads a bounded number of records.
//
// It also deletes the leases listed without their fleet (a creator killed between taking
// the lease and writing the record): each delete is a check-and-set at the listed index,
// and Nomad refuses to delete a locked variable, so a lease whose creator is still at work
// stays.
func (s *Fleets) prune(ctx context.Context, ns, created string) {
	refs, orphans, err := s.listFleetDir(ctx, ns)
	if err != nil {
		s.n.opts.Logger.Debug("could not list fleets to prune", "namespace", ns, "error", err)
		return
	}
	for _, m := range orphans {
		if err := s.n.vars.DeleteAt(ctx, m.Namespace, m.Path, m.ModifyIndex); err != nil {
			s.n.opts.Logger.Debug("could not delete a lease left without its fleet", "path", m.Path, "namespace", m.Namespace, "error", err)
		}
	}
	keep := s.n.keepEnded()
	if keep < 0 || len(refs) <= keep+1 {
		return // fewer than keep besides the new one: none can be beyond the newest keep
	}
	slices.SortFunc(refs, func(a, b fleetRef) int { return cmp.Compare(b.createIndex, a.createIndex) })
	ended := 0
	for _, r := range refs {
		if r.id == created {
			continue
		}
		f, err := s.Get(ctx, r.ns, r.id)
		if err != nil || !f.Status.Terminal() {
			continue
		}
		if ended++; ended > keep {
			s.deleteFleet(ctx, f)
		}
	}
}

// deleteFleet removes a finished fleet: its record first (check-and-set, so a fleet
// written meanwhile stays), then its bell and lease, then its member markers in its jobs'
// namespaces (best effort: deleteMembers). A lease still locked (its driver
// is exiting) cannot be deleted; it stays, and nothing lists it.
func (s *Fleets) deleteFleet(ctx context.Context, f *fleet.Record) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	path := s.fleetPath(f.ID, fleetRecordName)
	if err := s.n.vars.DeleteAt(ctx, f.Namespace, path, f.ModifyIndex); err != nil {
		s.n.opts.Logger.Debug("could not prune a finished fleet", "path", path, "namespace", f.Namespace, "error", err)
		return
	}
	for _, name := range []string{bellName, fleetLeaseName} {
		p := s.fleetPath(f.ID, name)
		if err := s.n.vars.Delete(ctx, f.Namespace, p); err != nil {
			s.n.opts.Logger.Debug("could not delete a pruned fleet's variable", "path", p, "namespace", f.Namespace, "error", err)
		}
	}
	s.deleteMembers(ctx, f)
}
