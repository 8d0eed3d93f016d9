package store

import (
	"context"
	"os"
)

// prune deletes the job's ended restarts beyond the newest DefaultKeep, as the Nomad store
// does, so that the state directory does not grow with every restart ever run. Best effort.
func (l *Local) prune(ctx context.Context, ns, job string) {
	recs, err := l.List(ctx, Filter{Namespace: ns, JobID: job})
	if err != nil {
		return
	}
	ended := 0
	for _, r := range recs {
		if r.JobID != job || !r.Status.Terminal() {
			continue
		}
		ended++
		if ended <= DefaultKeep {
			continue
		}
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
