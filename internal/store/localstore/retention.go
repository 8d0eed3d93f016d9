package localstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// prune deletes the job's ended restarts beyond the newest DefaultKeep, as the Nomad store
// does, so that the state directory does not grow with every restart ever run. Best effort.
func (l *Store) prune(ctx context.Context, ns, job string) {
	l.sweepLeases(ctx, ns)
	recs, err := l.List(ctx, store.Filter{Namespace: ns, JobID: job})
	if err != nil {
		return
	}
	for _, r := range endedBeyond(recs, job, store.DefaultKeep) {
		_ = l.locked(ctx, func() error {
			// Read again under the lock: only a record still ended goes.
			cur, err := l.readRecord(l.recordPath(r.Namespace, r.ID))
			if err != nil || !cur.Status.Terminal() {
				return nil
			}
			lease := l.leasePath(r.Namespace, r.ID)
			_ = os.Remove(lease + ".holder")
			_ = os.Remove(lease)
			return os.Remove(l.recordPath(r.Namespace, r.ID))
		})
	}
}

// endedBeyond returns the job's ended restarts past the newest keep, from recs listed
// newest first: what both stores prune.
func endedBeyond(recs []*restart.Record, job string, keep int) []*restart.Record {
	var beyond []*restart.Record
	ended := 0
	for _, r := range recs {
		if r.JobID != job || !r.Status.Terminal() {
			continue
		}
		ended++
		if ended > keep {
			beyond = append(beyond, r)
		}
	}
	return beyond
}

// sweepLeases deletes the namespace's lease files that have no record: a creator died
// between taking the lease and writing the record (CreateLeased), whose lock the kernel
// freed. Under the store's lock no creator is between the two (both happen within one hold
// of it), so a lease file without a record is one nobody will lock again. Best effort.
func (l *Store) sweepLeases(ctx context.Context, ns string) {
	dir := filepath.Dir(l.leasePath(ns, "x"))
	_ = l.locked(ctx, func() error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil
		}
		for _, e := range entries {
			id, ok := strings.CutSuffix(e.Name(), ".lock")
			if !ok || !store.ValidID(id) {
				continue
			}
			if _, err := os.Stat(l.recordPath(ns, id)); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			lease := l.leasePath(ns, id)
			_ = os.Remove(lease + ".holder")
			_ = os.Remove(lease)
		}
		return nil
	})
}
