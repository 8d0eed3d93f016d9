package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// errLeaseFree ends a follow when the lease of the restart it follows became free: its
// driver let go or died, and the caller (resume) takes over.
var errLeaseFree = errors.New("the restart's lease is free")

// probeBackoff is the pause between lease probes: a few seconds, doubling up to the lock's
// TTL (no sooner can a silent driver's lease expire), and never above the first pause where
// the lease frees at once.
func probeBackoff(ttl time.Duration, attempt int) time.Duration {
	first := 2 * time.Second
	if ttl > 0 && ttl/4 < first {
		first = max(ttl/4, 10*time.Millisecond) // a sped-up simulated cluster
	}
	limit := max(ttl, first)
	d := first
	for range attempt {
		d *= 2
		if d >= limit {
			return limit
		}
	}
	return d
}

// watchLease probes the lease of rec until it is free, then closes the returned channel.
// Failing probes (Nomad unreachable, no permission) count as held: the follow goes on.
func (a *app) watchLease(ctx context.Context, st store.Store, rec *restart.Record) <-chan struct{} {
	ttl, _ := st.LeaseExpiry()
	return untilLeaseFree(ctx, ttl, func() (bool, error) { return store.LeaseFree(ctx, st, rec.Namespace, rec.ID, a.by()) })
}

// untilLeaseFree calls free, paced by probeBackoff, until it answers true, then closes the
// returned channel.
func untilLeaseFree(ctx context.Context, ttl time.Duration, free func() (bool, error)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for attempt := 0; ; attempt++ {
			t := time.NewTimer(probeBackoff(ttl, attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if ok, err := free(); err == nil && ok {
				close(done)
				return
			}
		}
	}()
	return done
}

// waitingForDriver is said once when resume finds another driver holding the lease.
func waitingForDriver(st store.Store, rec *restart.Record, verbose bool) string {
	id := shortID(rec.ID, verbose)
	who := rec.Driver
	if who == "" {
		who = "another process"
	}
	ttl, delay := st.LeaseExpiry()
	if ttl == 0 {
		return fmt.Sprintf("Restart %s is driven by %s; waiting for it to finish or let go, to take over", id, who)
	}
	return fmt.Sprintf("Restart %s is driven by %s; waiting for it, or for its lease to expire (up to 2×TTL + lock delay, about %s), to take over",
		id, who, (2*ttl + delay).Round(time.Second))
}

// driveOrTakeOver drives rec here; when another process holds its lease, it follows the
// restart and takes over as soon as the lease is free (its driver let go, or died and its
// lease expired), so that resuming an orphan never waits forever.
func (a *app) driveOrTakeOver(ctx context.Context, p *printer, eng restarter, t *target, rec *restart.Record, verbose, jsonOut bool) error {
	said := false
	for {
		err := a.drive(ctx, p, eng, t.st, rec, verbose)
		if !errors.Is(err, store.ErrLeaseHeld) {
			return err
		}
		cur, gerr := t.st.Get(ctx, rec.Namespace, rec.ID)
		if gerr == nil {
			rec = cur
		}
		if !said && !jsonOut {
			said = true
			if h, _ := t.st.LeaseHolder(ctx, rec.Namespace, rec.ID); h != "" {
				rec.Driver = h // who holds the lease now, rather than who last wrote the record
			}
			p.header(a.now(), waitingForDriver(t.st, rec, verbose))
		}
		wctx, stop := context.WithCancel(ctx)
		ft := &target{ses: t.ses, st: t.st, rec: rec}
		err = a.follow(wctx, p, ft, verbose, true, a.watchLease(wctx, t.st, rec))
		stop()
		if !errors.Is(err, errLeaseFree) {
			return err
		}
		if cur, gerr := t.st.Get(ctx, rec.Namespace, rec.ID); gerr == nil {
			rec = cur
		}
		if !jsonOut {
			p.header(a.now(), fmt.Sprintf("Restart %s: its lease is free; taking over", shortID(rec.ID, verbose)))
		}
	}
}

// stoppedFollowing tells a viewer leaving a restart what becomes of it: it goes on only if
// some driver holds its lease.
func (a *app) stoppedFollowing(ctx context.Context, st store.Store, rec *restart.Record, verbose bool) {
	id := shortID(rec.ID, verbose)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	free, err := store.LeaseFree(pctx, st, rec.Namespace, rec.ID, a.by())
	switch {
	case err == nil && free:
		fmt.Fprintf(a.stderr, "Stopped following restart %s; no process drives it now (status: %s): continue it with `nomad-restart resume %s`\n", id, rec.Status, id)
	case err == nil:
		fmt.Fprintf(a.stderr, "Stopped following restart %s; it goes on without this viewer (status: %s). Follow it again with `nomad-restart attach %s`\n", id, rec.Status, id)
	default:
		fmt.Fprintf(a.stderr, "Stopped following restart %s (status: %s); whether a driver holds it is unknown (%s). Follow it again with `nomad-restart attach %s`, or continue it with `nomad-restart resume %s` if none does\n", id, rec.Status, oneLine(err.Error()), id, id)
	}
}

// noteHeldSteer follows a pause or cancel that was only recorded: its driver applies it when
// it next acts, which a dead driver does not until its lease expires.
func (a *app) noteHeldSteer(ctx context.Context, st store.Store, rec *restart.Record, cmd string, verbose bool) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	free, err := store.LeaseFree(pctx, st, rec.Namespace, rec.ID, a.by())
	id := shortID(rec.ID, verbose)
	who, _ := st.LeaseHolder(pctx, rec.Namespace, rec.ID)
	if who == "" {
		who = "another process"
	}
	switch {
	case err != nil:
		return
	case !free:
		ttl, delay := st.LeaseExpiry()
		expiry := ""
		if ttl > 0 {
			expiry = fmt.Sprintf(" (up to %s after it died)", (2*ttl + delay).Round(time.Second))
		}
		fmt.Fprintf(a.stdout, "    The %s is recorded; it takes effect when its driver, %s, acts, or once its lease expires%s and another driver takes it\n", cmd, who, expiry)
	case cmd == "pause":
		fmt.Fprintf(a.stdout, "    No process drives restart %s now: it stays paused until `nomad-restart resume %s`\n", id, id)
	}
}
