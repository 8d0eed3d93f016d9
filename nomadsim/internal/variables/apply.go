package variables

import (
	"maps"
	"net/http"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// op is a write operation, named as Nomad's VarOp.
type op string

const (
	opSet         op = "set"
	opCAS         op = "cas"
	opDelete      op = "delete"
	opDeleteCAS   op = "delete-cas"
	opLockAcquire op = "lock-acquire"
	opLockRelease op = "lock-release"
)

type outcome int

const (
	outcomeOK outcome = iota
	outcomeConflict
	outcomeError
)

// applyArgs is one write, validated and canonicalized.
type applyArgs struct {
	op         op
	namespace  string
	path       string
	items      map[string]string
	lock       *lock // the caller's lock, nil if none
	checkIndex uint64
}

// applyResult is what the state machine answered (Nomad's VarApplyStateResponse).
type applyResult struct {
	outcome outcome
	index   uint64    // the Raft index the write took, conflicts included
	written *variable // copy of the stored variable after an ok write; nil after a delete
	// change says whether the write changed the variable's existence or items, for
	// Config.OnChange; nil if it did not.
	change *Change
	// conflict is a copy of the conflicting variable; zero marks Nomad's "zero value"
	// conflict, which carries only namespace and path (and a lock on a release).
	conflict *variable
	zero     bool
	err      error
}

// apply runs one write as a Raft apply: it takes the next index (a conflict takes one too,
// as in Nomad), changes the state under the store's lock, and wakes blocking queries.
func (s *Store) apply(a applyArgs) applyResult {
	s.mu.Lock()
	i := s.idx.Next()
	old, existed := s.vars[key{a.namespace, a.path}]
	var oldItems map[string]string
	if existed {
		oldItems = old.items
	}
	var res applyResult
	switch a.op {
	case opSet:
		res = s.setLocked(i, a)
	case opCAS:
		res = s.casLocked(i, a)
	case opDelete:
		res = s.deleteLocked(i, a)
	case opDeleteCAS:
		res = s.deleteCASLocked(i, a)
	case opLockAcquire:
		res = s.acquireLocked(i, a)
	case opLockRelease:
		res = s.releaseLocked(i, a)
	}
	res.index = i
	if res.outcome == outcomeOK {
		switch a.op {
		case opLockAcquire:
			s.startTTLTimerLocked(*res.written)
		case opLockRelease:
			if a.lock != nil {
				s.stopTTLTimerLocked(a.lock.ID)
			}
		}
	}
	if res.outcome == outcomeOK {
		res.change = changeOf(a, existed, oldItems, s.vars[key{a.namespace, a.path}])
	}
	s.mu.Unlock()
	s.idx.Notify()
	if res.change != nil && s.onChange != nil {
		s.onChange(*res.change)
	}
	return res
}

// changeOf compares a variable before and after an ok write: nil unless it was created,
// deleted, or its items changed.
func changeOf(a applyArgs, existed bool, oldItems map[string]string, now *variable) *Change {
	ch := &Change{Namespace: a.namespace, Path: a.path}
	switch {
	case !existed && now != nil:
		ch.Created = true
	case existed && now == nil:
		ch.Deleted = true
	case now == nil || maps.Equal(oldItems, now.items):
		return nil
	}
	return ch
}

func isLocked(held, req *lock) bool {
	return held != nil && (req == nil || req.ID != held.ID)
}

func (s *Store) zeroConflict(a applyArgs, withLock bool) applyResult {
	z := &variable{namespace: a.namespace, path: a.path}
	if withLock {
		z.lock = &lock{}
	}
	return applyResult{outcome: outcomeConflict, conflict: z, zero: true}
}

func conflictWith(v *variable) applyResult {
	cp := *v
	cp.items = copyItems(v.items)
	return applyResult{outcome: outcomeConflict, conflict: &cp}
}

// setLocked writes a variable (Nomad's varSetTxn): refused while another holds its lock.
func (s *Store) setLocked(i uint64, a applyArgs) applyResult {
	k := key{a.namespace, a.path}
	now := s.now().UnixNano()
	v := &variable{
		namespace: a.namespace, path: a.path, items: copyItems(a.items), lock: copyLock(a.lock),
		createIndex: i, createTime: now, modifyIndex: i, modifyTime: now,
	}
	if old, ok := s.vars[k]; ok {
		if isLocked(old.lock, a.lock) {
			return s.zeroConflict(a, false)
		}
		v.createIndex, v.createTime = old.createIndex, old.createTime
	}
	s.vars[k] = v
	s.tableIndex = i
	cp := *v
	return applyResult{outcome: outcomeOK, written: &cp}
}

// casLocked is a check-and-set: index 0 creates only; otherwise the stored ModifyIndex must
// match.
func (s *Store) casLocked(i uint64, a applyArgs) applyResult {
	old, ok := s.vars[key{a.namespace, a.path}]
	switch {
	case a.checkIndex == 0 && ok:
		return conflictWith(old)
	case a.checkIndex != 0 && !ok:
		return s.zeroConflict(a, false)
	case ok && a.checkIndex != old.modifyIndex:
		return conflictWith(old)
	}
	return s.setLocked(i, a)
}

// deleteLocked removes a variable; deleting a missing one succeeds, a locked one conflicts.
func (s *Store) deleteLocked(i uint64, a applyArgs) applyResult {
	k := key{a.namespace, a.path}
	old, ok := s.vars[k]
	if !ok {
		return applyResult{outcome: outcomeOK}
	}
	if isLocked(old.lock, a.lock) {
		return s.zeroConflict(a, false)
	}
	delete(s.vars, k)
	s.deleted[k] = i
	s.tableIndex = i
	return applyResult{outcome: outcomeOK}
}

func (s *Store) deleteCASLocked(i uint64, a applyArgs) applyResult {
	old, ok := s.vars[key{a.namespace, a.path}]
	switch {
	case a.checkIndex == 0 && !ok:
		return applyResult{outcome: outcomeOK}
	case a.checkIndex != 0 && !ok:
		return s.zeroConflict(a, false)
	case a.checkIndex != old.modifyIndex:
		return conflictWith(old)
	}
	return s.deleteLocked(i, a)
}

// acquireLocked takes a variable's lock, creating the variable if needed.
func (s *Store) acquireLocked(i uint64, a applyArgs) applyResult {
	if old, ok := s.vars[key{a.namespace, a.path}]; ok && isLocked(old.lock, a.lock) {
		return s.zeroConflict(a, false)
	}
	return s.setLocked(i, a)
}

// releaseLocked drops a variable's lock, keeping its items and ModifyTime. A nil caller lock
// is the leader's own release when a lock's delay ends, which needs no ID.
func (s *Store) releaseLocked(i uint64, a applyArgs) applyResult {
	old, ok := s.vars[key{a.namespace, a.path}]
	if !ok {
		return applyResult{outcome: outcomeError, err: simhttp.Errorf(http.StatusInternalServerError, "variable doesn't exist")}
	}
	if old.lock == nil || old.lock.ID == "" {
		return applyResult{outcome: outcomeError, err: simhttp.Errorf(http.StatusInternalServerError, "variable doesn't hold a lock")}
	}
	if a.lock != nil && old.lock.ID != a.lock.ID {
		return s.zeroConflict(a, true)
	}
	old.lock = nil
	old.modifyIndex = i
	s.tableIndex = i
	cp := *old
	cp.items = nil // a release answers without the items
	return applyResult{outcome: outcomeOK, written: &cp}
}

func copyLock(l *lock) *lock {
	if l == nil {
		return nil
	}
	cp := *l
	return &cp
}
