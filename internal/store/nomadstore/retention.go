package nomadstore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// keepEnded is Options.Keep with its default.
func (n *Restarts) keepEnded() int {
	if n.opts.Keep == 0 {
		return store.DefaultKeep
	}
	return n.opts.Keep
}

// prune deletes the job's ended restarts beyond the newest keepEnded, so that Nomad
// Variables do not grow with every restart ever run. It runs when a restart of the job is
// created; it is best effort (a failure leaves records for the next prune).
//
// It reads only the records it may delete: the listing (metadata, no record read) orders
// the job's records by creation, and the newest keepEnded+1 stay unread, since a job has
// one restart in progress at most (the one just created) and the others ended.
//
// It also deletes the leases left without their record (see sweepLeases).
func (n *Restarts) prune(ctx context.Context, ns, job string) {
	jobSeg := n.jobSegment(job)
	dir := n.opts.Prefix + "/" + jobSeg + "/"
	metas, err := n.vars.List(ctx, ns, dir)
	if err != nil {
		n.opts.Logger.Debug("could not list restarts to prune", "job", job, "namespace", ns, "error", err)
		return
	}
	var heads []*nomadvars.Metadata
	for _, m := range metas {
		if id, ok := strings.CutPrefix(m.Path, dir); ok && isRestartID(id) {
			heads = append(heads, m)
		}
	}
	n.sweepLeases(ctx, dir, metas)
	keep := n.keepEnded()
	if keep < 0 || len(heads) <= keep+1 {
		return
	}
	slices.SortFunc(heads, func(a, b *nomadvars.Metadata) int { return cmp.Compare(b.CreateIndex, a.CreateIndex) })
	for _, m := range heads[keep+1:] {
		h := headRef{ns: ns, jobSeg: jobSeg, id: m.Path[strings.LastIndex(m.Path, "/")+1:]}
		r, err := n.getAt(ctx, h)
		if err == nil && r.Status.Terminal() && r.JobID == job {
			n.deleteRecord(ctx, r)
		}
	}
}

// sweepLeases deletes the lease variables under dir (a job's directory, as listed in metas)
// whose record is not listed: leases whose creator died after taking the lease and before
// writing the record (CreateLeased). Each delete is a check-and-set at the listed index,
// and Nomad refuses to delete a locked variable, so a lease whose creator is still at work,
// or that a driver took since the listing, stays.
func (n *Restarts) sweepLeases(ctx context.Context, dir string, metas []*nomadvars.Metadata) {
	listed := make(map[string]bool, len(metas))
	for _, m := range metas {
		listed[m.Path] = true
	}
	for _, m := range metas {
		head, ok := strings.CutSuffix(m.Path, "/lease")
		if !ok || listed[head] || !isRestartID(strings.TrimPrefix(head, dir)) {
			continue
		}
		if err := n.vars.DeleteAt(ctx, m.Namespace, m.Path, m.ModifyIndex); err != nil {
			n.opts.Logger.Debug("could not delete a lease left without its restart record", "path", m.Path, "namespace", m.Namespace, "error", err)
		}
	}
}

// deleteRecord removes an ended record: its head first (check-and-set, so a record written
// meanwhile stays), then its chunks and lease.
func (n *Restarts) deleteRecord(ctx context.Context, r *restart.Record) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	h := headRef{ns: nomadvars.Namespace(r.Namespace), jobSeg: n.jobSegment(r.JobID), id: r.ID}
	path := n.headPath(h.jobSeg, h.id)
	if err := n.vars.DeleteAt(ctx, h.ns, path, r.ModifyIndex); err != nil {
		n.opts.Logger.Debug("could not prune an ended restart", "path", path, "namespace", h.ns, "error", err)
		return
	}
	n.forget(h)
	metas, err := n.vars.List(ctx, h.ns, path+"/")
	if err != nil {
		return
	}
	for _, m := range metas {
		if err := n.vars.Delete(ctx, h.ns, m.Path); err != nil {
			n.opts.Logger.Debug("could not delete a pruned restart's variable", "path", m.Path, "namespace", h.ns, "error", err)
		}
	}
}

// dropEndedLease deletes the lease variable just released at index when its restart has
// ended: no driver will take it again, and each would otherwise stay in Nomad for good. A
// lease still locked cannot be deleted (Nomad refuses), hence after the release.
func (l *nomadLease) dropEndedLease(ctx context.Context, index uint64) {
	head := strings.TrimSuffix(l.lock.Path, "/lease")
	id := head[strings.LastIndex(head, "/")+1:]
	if !l.n.takeEnded(key(nomadvars.Namespace(l.lock.Namespace), id)) {
		rec, err := l.n.Get(ctx, l.lock.Namespace, id)
		if err != nil || !rec.Status.Terminal() {
			return
		}
	}
	if err := l.n.vars.DeleteAt(ctx, l.lock.Namespace, l.lock.Path, index); err != nil {
		l.n.opts.Logger.Debug("could not delete an ended restart's lease", "path", l.lock.Path, "namespace", l.lock.Namespace, "error", err)
	}
}

// markEnded notes that this handle wrote record k terminal.
func (n *Restarts) markEnded(k string) { n.endedHere.Store(k, struct{}{}) }

// takeEnded reports (once) whether this handle wrote record k terminal: a terminal record
// never changes status again, so its lease may go without a read.
func (n *Restarts) takeEnded(k string) bool {
	_, ended := n.endedHere.LoadAndDelete(k)
	return ended
}
