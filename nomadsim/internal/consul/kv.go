package consul

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// kvEntry is a key as Consul's GET /v1/kv answers it (structs.DirEntry, in its field
// order). Without sessions, LockIndex stays 0 and Session is never set.
type kvEntry struct {
	LockIndex   uint64
	Key         string
	Flags       uint64
	Value       []byte
	CreateIndex uint64
	ModifyIndex uint64
}

// kvStore is Consul's KV table with its tombstones, numbered by the Catalog's Raft index.
// Values are never changed in place: a write stores a new entry, so readers may keep the
// entries they were given.
type kvStore struct {
	idx *index.Index

	mu      sync.Mutex
	entries map[string]*kvEntry
	// tombstones holds, per deleted key (or deleted prefix), the index of its deletion, as
	// Consul's graveyard does, so that a prefix whose last key went away still reports a
	// higher index. Consul reaps tombstones after its tombstone TTL (15m); the sim keeps them.
	tombstones map[string]uint64
	// tableIndex is the index of the latest change to the KV table or its tombstones:
	// Consul's maxIndex("kvs", "tombstones").
	tableIndex uint64
}

func newKVStore(idx *index.Index) *kvStore {
	return &kvStore{idx: idx, entries: map[string]*kvEntry{}, tombstones: map[string]uint64{}}
}

// apply runs one write under the store's lock with the next Raft index and wakes blocking
// queries. Every write takes an index, as each is a Raft log entry in Consul, even one that
// changes nothing (a failed check-and-set, a delete of a missing key).
func (s *kvStore) apply(op func(i uint64) bool) bool {
	s.mu.Lock()
	ok := op(s.idx.Next())
	s.mu.Unlock()
	s.idx.Notify()
	return ok
}

// set stores a key as Consul's kvsSetTxn does: CreateIndex kept from an existing entry and
// nothing written (no index moves) when flags and value are unchanged.
func (s *kvStore) set(i uint64, key string, value []byte, flags uint64) {
	e := &kvEntry{Key: key, Flags: flags, Value: value, CreateIndex: i, ModifyIndex: i}
	if old, ok := s.entries[key]; ok {
		if old.Flags == flags && string(old.Value) == string(value) {
			return
		}
		e.CreateIndex, e.LockIndex = old.CreateIndex, old.LockIndex
	}
	s.entries[key] = e
	s.tableIndex = i
}

// setCAS stores a key only if its ModifyIndex is cas; cas 0 means "only if absent".
func (s *kvStore) setCAS(i uint64, key string, value []byte, flags, cas uint64) bool {
	old, ok := s.entries[key]
	if cas == 0 && ok || cas != 0 && (!ok || old.ModifyIndex != cas) {
		return false
	}
	s.set(i, key, value, flags)
	return true
}

// del removes a key and leaves its tombstone; a missing key changes nothing.
func (s *kvStore) del(i uint64, key string) {
	if _, ok := s.entries[key]; !ok {
		return
	}
	delete(s.entries, key)
	s.tombstones[key] = i
	s.tableIndex = i
}

// delCAS removes a key only if its ModifyIndex is cas. As in Consul's kvsDeleteCASTxn, a
// key that does not exist counts as deleted.
func (s *kvStore) delCAS(i uint64, key string, cas uint64) bool {
	old, ok := s.entries[key]
	if !ok {
		return true
	}
	if old.ModifyIndex != cas {
		return false
	}
	s.del(i, key)
	return true
}

// delTree removes every key under prefix with one tombstone for the prefix; Consul leaves
// no tombstone when the whole tree (prefix "") goes.
func (s *kvStore) delTree(i uint64, prefix string) {
	deleted := false
	for k := range s.entries {
		if strings.HasPrefix(k, prefix) {
			delete(s.entries, k)
			deleted = true
		}
	}
	if !deleted {
		return
	}
	if prefix != "" {
		s.tombstones[prefix] = i
	}
	s.tableIndex = i
}

// get reads one key: its ModifyIndex when it exists, else the table's index (Consul's
// kvsGetTxn with KVS.Get's choice of index).
func (s *kvStore) get(key string) kvRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		return kvRead{index: e.ModifyIndex, entries: []*kvEntry{e}}
	}
	return kvRead{index: s.tableIndex, notFound: true}
}

// list reads the keys under prefix in key order, with Consul's kvsListTxn index: the
// highest ModifyIndex among them or among the tombstones under the prefix, the table's
// index when that is 0 or the prefix is empty.
func (s *kvStore) list(prefix string) kvRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*kvEntry
	var sub uint64
	for k, e := range s.entries {
		if strings.HasPrefix(k, prefix) {
			out = append(out, e)
			sub = max(sub, e.ModifyIndex)
		}
	}
	slices.SortFunc(out, func(a, b *kvEntry) int { return strings.Compare(a.Key, b.Key) })
	if prefix == "" {
		sub = s.tableIndex
	}
	for k, i := range s.tombstones {
		if prefix != "" && strings.HasPrefix(k, prefix) {
			sub = max(sub, i)
		}
	}
	if sub == 0 {
		sub = s.tableIndex
	}
	return kvRead{index: sub, entries: out}
}

// kvRead is one run of a KV read: the index it reports, the entries it found, and whether
// it is a single key's "not found" (which blocks differently, see block).
type kvRead struct {
	index    uint64
	notFound bool
	entries  []*kvEntry
}

// block runs a KV read as Consul's blockingquery.Query does. Index 0 answers at once.
// Otherwise the read runs again at each write until its index passes q.MinIndex, or the
// wait (default 5m, at most 10m, plus up to a sixteenth of jitter) ends with the last
// result. A key still missing on a second run moves the bar to the index just read, so a
// query on a missing key wakes only when the key appears, not on every other write.
func (s *kvStore) block(ctx context.Context, q simhttp.Query, read func() kvRead) (kvRead, error) {
	changed := s.idx.Changed() // taken before the read, so no write between them is missed
	res := atLeastOne(read())
	if q.MinIndex == 0 || res.index > q.MinIndex {
		return res, nil
	}
	timer := time.NewTimer(blockingWait(q.Wait))
	defer timer.Stop()
	minIndex, notFound := q.MinIndex, res.notFound
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-timer.C:
			return res, nil
		case <-changed:
		}
		changed = s.idx.Changed()
		res = atLeastOne(read())
		if res.notFound {
			if notFound {
				minIndex = res.index
			}
			notFound = true
		}
		if res.index > minIndex {
			return res, nil
		}
	}
}

// blockingWait is Consul's RPCQueryTimeout with its default settings: no wait (or a
// non-positive one) is 5m, at most 10m, plus a random stagger of up to a sixteenth.
func blockingWait(wait time.Duration) time.Duration {
	switch {
	case wait > simhttp.MaxWait:
		wait = simhttp.MaxWait
	case wait <= 0:
		wait = simhttp.DefaultWait
	}
	if j := int64(wait) / simhttp.JitterFraction; j > 0 {
		wait += time.Duration(rand.Int64N(j))
	}
	return wait
}

// atLeastOne never reports index 0: Consul answers 1 instead, so that clients cannot spin
// on ?index=0.
func atLeastOne(r kvRead) kvRead {
	if r.index == 0 {
		r.index = 1
	}
	return r
}

// KVPut sets a key's value (flags 0), as PUT /v1/kv/<key> does.
func (c *Catalog) KVPut(key string, value []byte) {
	value = slices.Clone(value) // the store never changes a value, nor may its caller
	if len(value) == 0 {
		value = nil
	}
	c.kv.apply(func(i uint64) bool { c.kv.set(i, key, value, 0); return true })
}

// KVGet returns a key's value and whether the key exists.
func (c *Catalog) KVGet(key string) ([]byte, bool) {
	r := c.kv.get(key)
	if r.notFound {
		return nil, false
	}
	return slices.Clone(r.entries[0].Value), true
}
