package nomadstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// nomadLease is a Nomad variable lock on <record>/lease (or a fleet's lease), renewed at half its TTL until
// released. When renewals fail for a whole TTL, or Nomad says the lock is no longer ours,
// the lease is lost: another driver may take it once Nomad's lock delay has passed.
type nomadLease struct {
	n      *Restarts
	lock   nomadvars.Lock
	holder string
	// afterRelease runs after a successful Release (see lockLease); nil for none.
	afterRelease func(*nomadLease, context.Context, uint64)

	lost     chan struct{}
	lostOnce sync.Once
	stop     context.CancelFunc
	done     chan struct{}
	release  sync.Once
}

// AcquireLease implements store.Store.
func (n *Restarts) AcquireLease(ctx context.Context, namespace, id, holder string) (store.Lease, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	// The lock lives beside the record; refuse a lease on a restart that does not exist.
	// A record this handle wrote or read is known to exist (the driver of a restart just
	// filed here, or read before): no read for it.
	if !n.knows(h) {
		if _, err := n.readHead(ctx, h); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				n.forget(h)
			}
			return nil, err
		}
	}
	l, err := n.lockLease(ctx, h.ns, n.headPath(h.jobSeg, h.id)+"/lease", holder, (*nomadLease).dropEndedLease)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// lockLease takes the variable lock at path for holder (ErrLeaseHeld when another holds
// it) and renews it until released or lost: the lease of a restart, or of a fleet.
// afterRelease, when not nil, runs once Release freed the lock, with the index the lease
// variable was released at (to delete a lease no driver will take again).
func (n *Restarts) lockLease(ctx context.Context, ns, path, holder string, afterRelease func(*nomadLease, context.Context, uint64)) (*nomadLease, error) {
	if holder == "" {
		holder = "unknown"
	}
	v := &nomadvars.Variable{
		Namespace: ns,
		Path:      path,
		Items:     map[string]string{"holder": holder},
	}
	_, lock, err := n.vars.AcquireLock(ctx, v, n.opts.LockTTL, n.opts.LockDelay)
	if errors.Is(err, nomadvars.ErrLockHeld) {
		return nil, store.ErrLeaseHeld
	}
	if err != nil {
		return nil, n.storeErr(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	l := &nomadLease{n: n, lock: lock, holder: holder, afterRelease: afterRelease, lost: make(chan struct{}), stop: stop, done: make(chan struct{})}
	go l.renew(runCtx)
	return l, nil
}

func (l *nomadLease) Lost() <-chan struct{} { return l.lost }

func (l *nomadLease) markLost(reason string, err error) {
	l.lostOnce.Do(func() {
		l.n.opts.Logger.Warn("lease lost", "path", l.lock.Path, "namespace", l.lock.Namespace, "reason", reason, "error", err)
		close(l.lost)
	})
}

// renew keeps the lock alive. A renewal that fails for a passing reason (a leader
// election, a network blip) is retried every second until the TTL since the last good
// renewal has run out; a conflict or a missing lock means another holds it now.
func (l *nomadLease) renew(ctx context.Context) {
	defer close(l.done)
	every := l.n.opts.RenewEvery
	ttl := 2 * every // the TTL as the renewals see it (shorter on a sped-up simulation)
	lastOK := time.Now()
	next := every
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := l.n.vars.RenewLock(ctx, l.lock)
		switch {
		case err == nil:
			lastOK = time.Now()
			next = every
		case ctx.Err() != nil:
			return
		case errors.Is(err, nomadvars.ErrLockLost):
			l.markLost("Nomad no longer holds the lock for this driver", err)
			return
		case time.Since(lastOK) >= ttl:
			l.markLost("renewals failed for a whole TTL", err)
			return
		default:
			l.n.opts.Logger.Debug("lease renewal failed; retrying", "path", l.lock.Path, "error", err)
			next = max(min(every/4, ttl-time.Since(lastOK)), time.Millisecond)
		}
	}
}

// Release stops the renewals and unlocks, so another driver may take the lease at once. It
// unlocks even when ctx has ended (Ctrl-C detaching a driver is when it matters most).
func (l *nomadLease) Release(ctx context.Context) error {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	var err error
	l.release.Do(func() {
		l.stop()
		<-l.done
		select {
		case <-l.lost:
			return // nothing of ours to release
		default:
		}
		released, rerr := l.n.vars.ReleaseLock(ctx, l.lock)
		if rerr != nil && !errors.Is(rerr, nomadvars.ErrLockLost) {
			err = l.n.storeErr(rerr)
		}
		if rerr == nil && released != nil && l.afterRelease != nil {
			l.afterRelease(l, ctx, released.ModifyIndex)
		}
	})
	return err
}

// knows reports whether this handle holds the record's head from a write or a read of it.
func (n *Restarts) knows(h headRef) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.heads[key(h.ns, h.id)]
	return ok
}

// LeaseExpiry implements store.Records: a dead driver's lock is free once its TTL (twice the
// renewal pace, as the renewals see it) and Nomad's lock delay have passed.
func (n *Restarts) LeaseExpiry() (ttl, lockDelay time.Duration) {
	return 2 * n.opts.RenewEvery, n.opts.LockDelay
}

// LeaseHolder implements store.Records: the holder a driver wrote in the lease variable, while
// Nomad holds its lock.
func (n *Restarts) LeaseHolder(ctx context.Context, namespace, id string) (string, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return "", err
	}
	v, err := n.vars.Read(ctx, h.ns, n.headPath(h.jobSeg, h.id)+"/lease")
	if err != nil || !v.Locked {
		// No lock: it was released, or Nomad expired a dead holder's, whose name the
		// variable still holds.
		return "", nil
	}
	return v.Items["holder"], nil
}
