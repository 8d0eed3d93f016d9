package engine

import (
	"context"
	"errors"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// clientSyncGrace bounds how long a driver waits for Nomad's servers to show the effect of a
// restart request that a former attempt may have sent before it is sent again. An in-place
// restart runs on the client node, which reports task states to the servers in batches (every
// 200 ms in Nomad's client; a real agent showed the old counters for about 50 ms after the
// restart call had returned). Reading too early would make the request look lost, and sending
// it again would restart the tasks twice. Ten sync intervals leave room for a slow client.
// It is Nomad's time: against a simulation running faster (HealthConfig.TimeScale) the real
// wait is shorter by as much.
const clientSyncGrace = 2 * time.Second

// awaitRestartEvidence reads an allocation whose restart request may already have been sent
// and reports whether it took effect, waiting up to clientSyncGrace (with blocking queries,
// not polling) for the servers to catch up before concluding that it did not.
func (d *driver) awaitRestartEvidence(ctx context.Context, p restart.AllocProgress) (*restart.Alloc, bool, error) {
	tookEffect := func(a *restart.Alloc) bool {
		return restart.InPlaceTookEffect(p.Before, a) &&
			(len(p.Tasks) == 0 || len(restart.PendingTasks(p.Before, a)) == 0)
	}
	a, err := d.readAlloc(ctx, p.ID)
	if err != nil {
		return nil, false, err
	}
	if tookEffect(a) {
		return a, true, nil
	}
	grace := clientSyncGrace
	if scale := d.e.health.TimeScale; scale > 0 {
		grace = time.Duration(float64(grace) / scale)
	}
	graceCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	index := a.ModifyIndex
	for {
		next, nextIndex, err := d.e.cluster.WatchAllocation(graceCtx, p.ID, index)
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				// A failed watch proves nothing either way: let the grace run out, then decide
				// from a fresh read.
				<-graceCtx.Done()
				if ctx.Err() != nil {
					return nil, false, ctx.Err()
				}
			}
			a, err := d.readAlloc(ctx, p.ID)
			if err != nil {
				return nil, false, err
			}
			return a, tookEffect(a), nil
		}
		a, index = next, nextIndex
		if tookEffect(a) {
			return a, true, nil
		}
	}
}
