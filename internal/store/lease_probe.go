package store

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"
)

// LeaseFree tells whether a restart's lease is free now, by taking it and giving it straight
// back. Neither store can otherwise tell a live driver from a dead one (a local flock and a
// Nomad lock both only say so to whoever tries them). It takes the lease for an instant: a
// driver starting at that very moment gets ErrLeaseHeld and should try again.
func LeaseFree(ctx context.Context, s Store, namespace, id, holder string) (bool, error) {
	return probeLease(ctx, func() (Lease, error) { return s.AcquireLease(ctx, namespace, id, holder) })
}

// probeLease takes a lease with acquire and gives it straight back: whether it was free.
func probeLease(ctx context.Context, acquire func() (Lease, error)) (bool, error) {
	l, err := acquire()
	if errors.Is(err, ErrLeaseHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := l.Release(ctx); err != nil {
		return true, err
	}
	return true, nil
}

// LeaseTiming is implemented by stores whose dead drivers' leases expire after a while
// rather than at once (the Nomad store): how long after a driver died its lease is free.
type LeaseTiming interface {
	// LeaseExpiry is the lock TTL (as the renewals see it) and Nomad's lock delay.
	LeaseExpiry() (ttl, lockDelay time.Duration)
}

// LeaseExpiry implements LeaseTiming.
func (n *Nomad) LeaseExpiry() (ttl, lockDelay time.Duration) {
	return 2 * n.opts.RenewEvery, n.opts.LockDelay
}

// LeaseHolder names who holds a restart's lease, as its holder wrote it when taking it; ""
// when the store cannot say. It is for humans only: whether the lease is held at all is
// LeaseFree's answer, since a dead holder's name stays behind.
func LeaseHolder(ctx context.Context, s Store, namespace, id string) string {
	if sc, ok := s.(*clusterScoped); ok {
		s = sc.Store
	}
	switch st := s.(type) {
	case *Nomad:
		h, err := st.locate(ctx, namespace, id)
		if err != nil {
			return ""
		}
		v, err := st.vars.Read(ctx, h.ns, st.headPath(h.jobSeg, h.id)+"/lease")
		if err != nil || v.Lock == nil {
			// No lock: it was released, or Nomad expired a dead holder's, whose name the
			// variable still holds.
			return ""
		}
		return v.Items["holder"]
	case *Local:
		rec, err := st.Get(ctx, namespace, id)
		if err != nil {
			return ""
		}
		b, err := os.ReadFile(st.leasePath(rec.Namespace, rec.ID) + ".holder")
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	return ""
}
