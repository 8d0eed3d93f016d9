package store

import (
	"context"
	"net/http"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// DefaultKeep is how many ended restarts of a job the Nomad store keeps by default.
const DefaultKeep = 20

// keepEnded is NomadOptions.Keep with its default.
func (n *Nomad) keepEnded() int {
	if n.opts.Keep == 0 {
		return DefaultKeep
	}
	return n.opts.Keep
}

// prune deletes the job's ended restarts beyond the newest keepEnded, so that Nomad
// Variables do not grow with every restart ever run. It runs when a restart of the job is
// created; it is best effort (a failure leaves records for the next prune).
func (n *Nomad) prune(ctx context.Context, ns, job string) {
	keep := n.keepEnded()
	if keep < 0 {
		return
	}
	recs, err := n.List(ctx, Filter{Namespace: ns, JobID: job})
	if err != nil {
		n.opts.Logger.Debug("could not list restarts to prune", "job", job, "namespace", ns, "error", err)
		return
	}
	ended := 0
	for _, r := range recs {
		if r.JobID != job || !r.Status.Terminal() {
			continue
		}
		ended++
		if ended > keep {
			n.deleteRecord(ctx, r)
		}
	}
}

// deleteRecord removes an ended record: its head first (check-and-set, so a record written
// meanwhile stays), then its chunks and lease.
func (n *Nomad) deleteRecord(ctx context.Context, r *restart.Record) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	h := headRef{ns: normNamespace(r.Namespace), jobSeg: n.jobSegment(r.JobID), id: r.ID}
	path := n.headPath(h.jobSeg, h.id)
	if _, err := n.client.Variables().CheckedDelete(path, r.ModifyIndex, n.wo(ctx, h.ns)); err != nil {
		n.opts.Logger.Debug("could not prune an ended restart", "path", path, "namespace", h.ns, "error", err)
		return
	}
	n.forget(h)
	metas, _, err := n.client.Variables().PrefixList(path+"/", n.qo(ctx, h.ns))
	if err != nil {
		return
	}
	for _, m := range metas {
		if _, err := n.client.Variables().Delete(m.Path, n.wo(ctx, h.ns)); err != nil && statusOf(err) != http.StatusNotFound {
			n.opts.Logger.Debug("could not delete a pruned restart's variable", "path", m.Path, "namespace", h.ns, "error", err)
		}
	}
}

// dropEndedLease deletes the lease variable just released at index when its restart has
// ended: no driver will take it again, and each would otherwise stay in Nomad for good. A
// lease still locked cannot be deleted (Nomad refuses), hence after the release.
func (l *nomadLease) dropEndedLease(ctx context.Context, index uint64) {
	head := strings.TrimSuffix(l.path, "/lease")
	rec, err := l.n.Get(ctx, l.ns, head[strings.LastIndex(head, "/")+1:])
	if err != nil || !rec.Status.Terminal() {
		return
	}
	if _, err := l.n.client.Variables().CheckedDelete(l.path, index, l.n.wo(ctx, l.ns)); err != nil {
		l.n.opts.Logger.Debug("could not delete an ended restart's lease", "path", l.path, "namespace", l.ns, "error", err)
	}
}
