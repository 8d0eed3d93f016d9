package store

import (
	"context"
	"errors"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// Records keeps the records of one kind: restarts (*restart.Record, in a Store) or fleets
// (*fleet.Record, in Fleets). Steering, following and driving either kind go through it.
// Every write is a check-and-set on the record's ModifyIndex, and a written record is
// never seen half-written.
type Records[R any] interface {
	// Create stores a new record and sets its CreateIndex and ModifyIndex; ErrExists when
	// a record of the same ID exists (see Store and Fleets for what else each refuses).
	Create(ctx context.Context, rec R) error
	// Get reads a record by its full ID; the kind's not-found error if none (ErrNotFound,
	// ErrFleetNotFound).
	Get(ctx context.Context, namespace, id string) (R, error)
	// Find resolves an ID or unique prefix across the namespaces the store can see
	// (namespace "" or "*" for all); the kind's not-found error, or *AmbiguousIDError.
	Find(ctx context.Context, namespace, prefix string) (R, error)
	// Update writes rec if its ModifyIndex still matches the stored one, and then sets
	// rec's ModifyIndex (and ModifyTime) to the new values. On a mismatch it returns
	// ErrConflict and changes nothing. It keeps nothing of rec (its slices may be reused
	// once it returns).
	Update(ctx context.Context, rec R) error
	// Watch blocks until the stored record's ModifyIndex is greater than afterIndex, then
	// returns it (readers that follow everything: attach, the page). It returns ctx's
	// error when ctx ends first.
	Watch(ctx context.Context, namespace, id string, afterIndex uint64) (R, error)
	// WatchControl is how a driver follows operators' steering: with token 0 it answers at
	// once with the first token (the record may be nil: read it after this call, so that
	// no change stored before the token is missed); otherwise it blocks until an operator
	// may have changed the record's Control since the call that returned token, and
	// returns the record (possibly without the parts a driver does not need) with the
	// token to pass next. A store in Nomad is not woken by the driver's own writes (see
	// Ring); the local store, whose reads cost no request, is woken by every write.
	WatchControl(ctx context.Context, namespace, id string, token uint64) (R, uint64, error)
	// Ring wakes the record's WatchControl after an operator stored a change of Control.
	// Mutate calls it; a failed ring delays the driver's notice until its next write,
	// whose check-and-set then fails on the changed record.
	Ring(ctx context.Context, namespace, id string) error
	// CreateLeased is Create for a process that drives the record it creates: the record's
	// lease is taken for holder before the record is written, so that no one listing the
	// records (an agent looking for restarts and fleets no one drives) ever sees it with
	// its lease free. A creation that fails keeps nothing: neither the record nor its lease.
	// A lease held already (a record of that ID being created or driven) is ErrExists.
	CreateLeased(ctx context.Context, rec R, holder string) (Lease, error)
	// AcquireLease takes the driver's lease on a record, or fails with ErrLeaseHeld. The
	// lease renews itself until released or lost.
	AcquireLease(ctx context.Context, namespace, id, holder string) (Lease, error)
	// LeaseHolder names who holds the record's lease, as its holder wrote it when taking
	// it; "" when no one does or the store cannot say. It is for humans only: whether the
	// lease is held at all is LeaseFree's answer, since a dead holder's name may stay
	// behind.
	LeaseHolder(ctx context.Context, namespace, id string) (string, error)
	// LeaseExpiry is how long after a driver died its lease is free: the lease's TTL (as
	// its renewals see it) and Nomad's lock delay; zero for a store whose dead drivers'
	// leases end at once (the local one).
	LeaseExpiry() (ttl, lockDelay time.Duration)
}

// Mutate reads a record, applies change and writes it back, retrying on conflicts. It is
// how operators change Control and how anyone makes a small change without holding the
// lease. A change of Control rings the record's driver (Records.Ring).
func Mutate[R steer.Steered](ctx context.Context, s Records[R], namespace, id string, change func(R) error) (R, error) {
	var before restart.Control
	rec, err := nomadvars.ReadChangeWrite(ctx, ErrConflict,
		func() (R, error) { return s.Get(ctx, namespace, id) },
		func(rec R) (bool, error) { before = steer.HeadOf(rec).Control; return true, change(rec) },
		func(rec R) error { return s.Update(ctx, rec) })
	if err != nil {
		var none R
		return none, err // the record as change left it is not the caller's to see
	}
	if h := steer.HeadOf(rec); h.Control != before && !h.Status.Terminal() {
		// Best effort: the change is stored, and the driver meets it at its next write
		// if the ring is lost.
		_ = s.Ring(ctx, h.Namespace, h.ID)
	}
	return rec, nil
}

// LeaseFree tells whether a record's lease is free now, by taking it and giving it straight
// back. Neither store can otherwise tell a live driver from a dead one (a local flock and a
// Nomad lock both only say so to whoever tries them). It takes the lease for an instant: a
// driver starting at that very moment gets ErrLeaseHeld and should try again.
func LeaseFree[R any](ctx context.Context, s Records[R], namespace, id, holder string) (bool, error) {
	l, err := s.AcquireLease(ctx, namespace, id, holder)
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
