package nomadstore

import (
	"context"
	"errors"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Watch implements store.Fleets with blocking reads of the fleet's variable. Passing
// failures do not end it (it is a long wait): it backs off as a restart's watch does.
func (s *Fleets) Watch(ctx context.Context, namespace, id string, afterIndex uint64) (*fleet.Record, error) {
	ns, err := s.home(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	path := s.fleetPath(id, fleetRecordName)
	var wait uint64
	backoff := 50 * time.Millisecond
	for {
		v, lastIndex, err := s.n.watching.ReadAfter(ctx, ns, path, nomadvars.Wait{After: wait, Time: headWatchWait})
		switch {
		case err != nil && cluster.IsTransient(err):
			s.n.opts.Logger.Debug("watching a fleet record: retrying", "fleet", id, "error", err)
			if !cluster.Sleep(ctx, backoff) {
				return nil, ctx.Err()
			}
			backoff = min(2*backoff, watchMaxBackoff)
			continue
		case err != nil:
			return nil, s.fleetErr(err)
		}
		backoff = 50 * time.Millisecond
		if v.ModifyIndex > afterIndex {
			return s.decode(v)
		}
		wait = max(afterIndex, v.ModifyIndex, wait, lastIndex)
	}
}

// WatchControl implements store.Fleets with the fleet's control bell, as WatchControl does
// for a restart: the driver's UpdateFleet writes the record, never the bell, so only
// RingFleet wakes it. With token 0 it creates the bell when needed and returns its index
// with the fleet as read after it (so no change stored before the token is missed).
func (s *Fleets) WatchControl(ctx context.Context, namespace, id string, token uint64) (*fleet.Record, uint64, error) {
	ns, err := s.home(ctx, namespace, id)
	if err != nil {
		return nil, 0, err
	}
	bell := s.fleetPath(id, bellName)
	var next uint64
	if token == 0 {
		next, err = s.n.establishBellAt(ctx, ns, bell)
	} else {
		next, err = s.n.awaitBellAt(ctx, ns, bell, token)
	}
	if err != nil {
		return nil, 0, plumbingErr(err)
	}
	f, err := s.Get(ctx, ns, id)
	if errors.Is(err, store.ErrFleetNotFound) && token == 0 {
		// A bell for no fleet: take back the one just made (best effort).
		_ = s.n.vars.Delete(ctx, ns, bell)
	}
	if err != nil {
		return nil, 0, err
	}
	return f, next, nil
}

// Ring implements store.Fleets: one write of the bell, as Ring for a restart.
func (s *Fleets) Ring(ctx context.Context, namespace, id string) error {
	ns, err := s.home(ctx, namespace, id)
	if err != nil {
		return err
	}
	return plumbingErr(s.n.ringAt(ctx, ns, s.fleetPath(id, bellName)))
}

// AcquireLease implements store.Fleets with the restart store's lease (a variable lock,
// renewed at half its TTL; Lost closes when it cannot be renewed). A released fleet lease's
// variable is deleted, so that FleetLeaseHolder says no one holds it.
func (s *Fleets) AcquireLease(ctx context.Context, namespace, id, holder string) (store.Lease, error) {
	ns, err := s.home(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	// The lock lives beside the record; refuse a lease on a fleet that does not exist.
	if _, err := s.n.vars.Read(ctx, ns, s.fleetPath(id, fleetRecordName)); err != nil {
		return nil, s.fleetErr(err)
	}
	l, err := s.n.lockLease(ctx, ns, s.fleetPath(id, fleetLeaseName), holder, (*nomadLease).dropReleased)
	if err != nil {
		return nil, plumbingErr(err)
	}
	return l, nil
}

// dropReleased deletes a lease variable just released at index, unless another driver
// took it since (the delete is a check-and-set on index). The next driver's AcquireLock
// creates it again.
func (l *nomadLease) dropReleased(ctx context.Context, index uint64) {
	if err := l.n.vars.DeleteAt(ctx, l.lock.Namespace, l.lock.Path, index); err != nil {
		l.n.opts.Logger.Debug("could not delete a released lease", "path", l.lock.Path, "namespace", l.lock.Namespace, "error", err)
	}
}

// LeaseHolder implements store.Records: the holder a driver wrote when it took the lease. It is
// for humans: a driver that died leaves its name until the next one takes the lease
// (whether a lease is held at all is LeaseFree's answer).
func (s *Fleets) LeaseHolder(ctx context.Context, namespace, id string) (string, error) {
	ns, err := s.home(ctx, namespace, id)
	if err != nil {
		return "", err
	}
	v, err := s.n.vars.Read(ctx, ns, s.fleetPath(id, fleetLeaseName))
	if errors.Is(err, nomadvars.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", s.fleetErr(err)
	}
	if !v.Locked {
		// The lock expired (its holder died) or was released: the name left is history.
		return "", nil
	}
	return v.Items["holder"], nil
}

// LeaseExpiry implements store.Records: a fleet's lease is a lock as a restart's is.
func (s *Fleets) LeaseExpiry() (ttl, lockDelay time.Duration) { return s.n.LeaseExpiry() }

// WatchList implements store.Fleets: one blocking listing of the fleets' directory, which Nomad
// answers when a variable under it changes (a fleet's record, bell or lease), not on every
// change of the variables' table.
func (s *Fleets) WatchList(ctx context.Context, namespace string, afterIndex uint64, wait time.Duration) (uint64, error) {
	if store.AllNamespaces(namespace) {
		namespace = "*"
	}
	_, index, err := s.n.watching.ListAfter(ctx, namespace, s.fleetDir(), nomadvars.Wait{After: afterIndex, Time: wait})
	if err != nil {
		return 0, s.fleetErr(err)
	}
	return index, nil
}
