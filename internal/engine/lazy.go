package engine

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// lazyLinger is how long a change made with stepLazy may stay unwritten. Operators
// following the restart from elsewhere see progress this much later; in exchange the
// allocations of a batch that finish together cost one write, not one each.
const lazyLinger = 250 * time.Millisecond

// stepLazy applies a change that need not be durable before the driver goes on: progress a
// later driver would find again from Nomad's facts (an allocation done, failed or skipped,
// a request's effect seen, what an allocation waits for). Nothing is ever sent to Nomad on
// the strength of it. It is written with the next step, or by flushLazily within
// lazyLinger, whichever comes first; its events reach the sink once written.
func (d *driver) stepLazy(change func(r *restart.Record)) {
	d.mu.Lock()
	change(d.rec)
	d.gen++
	d.mu.Unlock()
	select {
	case d.dirty <- struct{}{}:
	default:
	}
}

// flushLazily writes stepLazy's changes within lazyLinger until ctx ends. A failed write is
// left to the next step, which meets the same failure and stops the driver if it lasts.
func (d *driver) flushLazily(ctx context.Context) {
	t := time.NewTimer(lazyLinger)
	t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.dirty:
		}
		t.Reset(lazyLinger)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		d.mu.Lock()
		gen := d.gen
		d.mu.Unlock()
		// Unhurried: nobody waits on this write, so the store may leave the next one (maybe
		// a batch's intents, which its requests wait on) less to do.
		if err := d.flush(store.Unhurried(ctx), gen); err != nil && ctx.Err() == nil {
			d.log.Debug("writing progress failed; the next step writes it", "err", err)
		}
	}
}
