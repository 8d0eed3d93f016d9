package store

import (
	"context"
	"os"
	"strings"
	"time"
)

// LeaseExpiry implements Records: a dead driver's lock is free once its TTL (twice the
// renewal pace, as the renewals see it) and Nomad's lock delay have passed.
func (n *Nomad) LeaseExpiry() (ttl, lockDelay time.Duration) {
	return 2 * n.opts.RenewEvery, n.opts.LockDelay
}

// LeaseHolder implements Records: the holder a driver wrote in the lease variable, while
// Nomad holds its lock.
func (n *Nomad) LeaseHolder(ctx context.Context, namespace, id string) (string, error) {
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

// LeaseExpiry implements Records: a local lease is a file lock, free as soon as its holder
// dies.
func (l *Local) LeaseExpiry() (ttl, lockDelay time.Duration) { return 0, 0 }

// LeaseHolder implements Records: the holder written beside the lock file.
func (l *Local) LeaseHolder(ctx context.Context, namespace, id string) (string, error) {
	rec, err := l.Get(ctx, namespace, id)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(l.leasePath(rec.Namespace, rec.ID) + ".holder")
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(b)), nil
}
