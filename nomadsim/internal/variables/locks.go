package variables

import (
	"log/slog"
	"net/http"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// startTTLTimerLocked arms the TTL timer of a newly acquired lock. As on Nomad's leader the
// timer runs for twice the TTL (a grace period for clients); when it fires the lock is not
// released at once but after its lock delay, during which nobody can renew or take it.
func (s *Store) startTTLTimerLocked(v variable) {
	if s.closed || v.lock == nil {
		return
	}
	id := v.lock.ID
	if _, ok := s.ttlTimers[id]; ok {
		// Nomad keeps the running timer when a holder acquires again with its own ID.
		return
	}
	s.armTTLLocked(v.namespace, v.path, *v.lock)
}

// armTTLLocked (re)starts a lock's TTL timer. Each timer is a distinct value so that a
// timer that fired while a renewal replaced it recognises itself as stale.
func (s *Store) armTTLLocked(namespace, path string, l lock) {
	t := &ttlTimer{}
	t.stop = s.afterFunc(2*l.TTL, func() { s.ttlExpired(namespace, path, l, t) })
	s.ttlTimers[l.ID] = t
}

func (s *Store) ttlExpired(namespace, path string, l lock, t *ttlTimer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.ttlTimers[l.ID]; !ok || cur != t || s.closed {
		return // released or renewed away in the meantime
	}
	s.startDelayLocked(namespace, path, l)
}

// startDelayLocked ends a lock's TTL: the lock stays held (and cannot be renewed) for its
// lock delay, then the leader removes it.
func (s *Store) startDelayLocked(namespace, path string, l lock) {
	delete(s.ttlTimers, l.ID)
	slog.Debug("nomadsim: variable lock TTL expired, starting delay", "namespace", namespace, "path", path, "delay", l.LockDelay)
	n := s.nextDelay
	s.nextDelay++
	s.delayTimers[n] = s.afterFunc(l.LockDelay, func() {
		s.mu.Lock()
		delete(s.delayTimers, n)
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			s.invalidate(namespace, path)
		}
	})
}

// ExpireLock ends a held lock's TTL now, as if its holder had stopped renewing it (a
// crashed driver, a partition): the lock stays held through its lock delay, then is
// released. It reports whether the variable held a lock whose TTL was running.
func (s *Store) ExpireLock(namespace, path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[key{namespace, path}]
	if !ok || v.lock == nil || s.closed {
		return false
	}
	t, ok := s.ttlTimers[v.lock.ID]
	if !ok {
		return false
	}
	t.stop()
	s.startDelayLocked(namespace, path, *v.lock)
	return true
}

// Lookup returns a stored variable's items, the ID of the lock it holds ("" if none) and
// its ModifyIndex, for the simulation's Go API and tests.
func (s *Store) Lookup(namespace, path string) (items map[string]string, lockID string, modifyIndex uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[key{namespace, path}]
	if !ok {
		return nil, "", 0, false
	}
	if v.lock != nil {
		lockID = v.lock.ID
	}
	return copyItems(v.items), lockID, v.modifyIndex, true
}

// invalidate removes whatever lock the variable holds when a delay ends, as Nomad's leader
// does (its release carries no lock ID).
func (s *Store) invalidate(namespace, path string) {
	res := s.apply(applyArgs{op: opLockRelease, namespace: namespace, path: path})
	if res.outcome != outcomeOK {
		slog.Debug("nomadsim: lock expiry found no lock", "namespace", namespace, "path", path, "error", res.err)
	}
}

func (s *Store) stopTTLTimerLocked(id string) {
	if t, ok := s.ttlTimers[id]; ok {
		t.stop()
		delete(s.ttlTimers, id)
	}
}

// renew extends a held lock's TTL timer (Nomad's Variables.RenewLock).
func (s *Store) renew(namespace, path, lockID string) (metaJSON, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[key{namespace, path}]
	if !ok {
		return metaJSON{}, simhttp.Errorf(http.StatusNotFound, "variable doesn't exist")
	}
	if v.lock == nil {
		return metaJSON{}, simhttp.Errorf(http.StatusConflict, "variable doesn't hold a lock")
	}
	if v.lock.ID != lockID {
		return metaJSON{}, simhttp.Errorf(http.StatusConflict, "attempting to modify locked variable")
	}
	t, ok := s.ttlTimers[lockID]
	if !ok {
		// The TTL ran out: the lock is in its delay and can no longer be renewed.
		return metaJSON{}, simhttp.Errorf(http.StatusConflict, "attempting to modify locked variable")
	}
	t.stop()
	s.armTTLLocked(v.namespace, v.path, *v.lock)
	return v.meta(true), nil
}
