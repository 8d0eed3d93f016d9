package engine

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// lazyLinger is how long a change made with stepLazy may stay unwritten. Operators
// following the restart from elsewhere see progress this much later; in exchange the
// allocations of a batch that finish together cost one write, not one each, and a batch that
// ends within it has its outcome carried by the next batch's intents.
const lazyLinger = 250 * time.Millisecond

// progressLinger is lazyLinger for an allocation's progress (its request went out, what it
// waits for, its replacement) and its end: it may wait for the batch's end, which a batch
// of one in place reaches within a second or so and whose decision lingers lazyLinger, so
// that a batch costs one write (its intents, which carry the batch before) however far
// apart its allocations end. A long wait (health checks, a slow start) is still written
// within it.
const progressLinger = 2 * time.Second

// stepLazy applies a change that need not be durable before the driver goes on: what a
// later driver would find again from Nomad's facts or decide again from the record (a
// batch started or decided, a warning). Nothing is ever sent to Nomad on the strength of
// it. It is written with the next step, or by flushLazily within lazyLinger, whichever
// comes first; its events reach the sink once written.
func (d *driver) stepLazy(change func(r *restart.Record)) {
	d.stepWithin(lazyLinger, change)
}

// stepProgress is stepLazy for an allocation's progress and end, written within
// progressLinger.
func (d *driver) stepProgress(change func(r *restart.Record)) {
	d.stepWithin(progressLinger, change)
}

// stepWithin applies change and has it written within linger at the latest.
func (d *driver) stepWithin(linger time.Duration, change func(r *restart.Record)) {
	due := time.Now().Add(linger)
	d.mu.Lock()
	change(d.rec)
	d.gen++
	sooner := d.lazyDue.IsZero() || due.Before(d.lazyDue)
	if sooner {
		d.lazyDue = due
	}
	d.mu.Unlock()
	if sooner {
		select {
		case d.dirty <- struct{}{}:
		default:
		}
	}
}

// flushLazily writes the lazy changes by their due time until ctx ends. A failed write is
// left to the next step, which meets the same failure and stops the driver if it lasts.
func (d *driver) flushLazily(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		d.mu.Lock()
		due := d.lazyDue
		d.mu.Unlock()
		var fire <-chan time.Time
		if !due.IsZero() {
			t.Reset(time.Until(due))
			fire = t.C
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-d.dirty: // a change due sooner, or the first since the last write
			t.Stop()
			continue
		case <-fire:
		}
		d.mu.Lock()
		gen, due := d.gen, d.lazyDue
		d.mu.Unlock()
		if due.IsZero() || time.Now().Before(due) {
			continue // written meanwhile by a step, or due later now
		}
		// Unhurried: nobody waits on this write, so the store may leave the next one (maybe
		// a batch's intents, which its requests wait on) less to do.
		if err := d.flush(store.Unhurried(ctx), gen); err != nil && ctx.Err() == nil {
			d.log.Debug("writing progress failed; the next step writes it", "err", err)
		}
	}
}
