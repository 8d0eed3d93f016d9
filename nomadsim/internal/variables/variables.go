// Package variables is nomadsim's Nomad Variables store: variables per namespace and path,
// check-and-set writes and deletes, locks with a TTL and a lock delay, and blocking reads,
// behind Nomad's /v1/var and /v1/vars HTTP API with Nomad's codes, texts and headers.
package variables

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

// Config wires a Store into the simulated cluster.
type Config struct {
	Index *index.Index     // shared simulated Raft index: every write takes Index.Next()
	Now   func() time.Time // wall clock for CreateTime and ModifyTime; time.Now if nil
	ACL   *acl.ACL         // may be disabled; never nil
	// AfterFunc schedules the lock timers (TTL expiry, then lock delay); time.AfterFunc if
	// nil. A simulation with a time scale passes one that shortens the durations. The
	// returned function stops the timer and reports whether it did.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// OnChange, if set, learns of every write that changed what a reader of the variable
	// sees: its creation, its deletion, or new items (a lock taken or released, or a write
	// of the same items, changes none). It is called after the write is applied, outside
	// the store's lock, from the writer's goroutine. The simulation re-renders the
	// templates that read the variable, as a client's template runner does.
	OnChange func(c Change)
}

// Change is a write that changed a variable's existence or items.
type Change struct {
	Namespace, Path  string
	Created, Deleted bool
}

type key struct{ namespace, path string }

// ttlTimer is a running lock TTL timer.
type ttlTimer struct{ stop func() bool }

// variable is a stored variable.
type variable struct {
	namespace   string
	path        string
	items       map[string]string
	lock        *lock
	createIndex uint64
	createTime  int64
	modifyIndex uint64
	modifyTime  int64
}

// Store holds the cluster's variables. It is safe for concurrent use.
type Store struct {
	idx       *index.Index
	now       func() time.Time
	acl       *acl.ACL
	afterFunc func(time.Duration, func()) func() bool
	onChange  func(Change)

	mu   sync.Mutex
	vars map[key]*variable
	// deleted holds the index at which each deleted variable went, so that a blocking
	// listing wakes on a deletion under its prefix (Nomad's wakes on any change under the
	// prefix, and only there: its query watches the prefix in the state store's tree).
	deleted map[key]uint64
	// tableIndex is the index of the latest change to the table, which reads of missing
	// variables and lists report, as Nomad's index table does.
	tableIndex uint64
	// ttlTimers holds the running TTL timer of each held lock, by lock ID, as the leader's
	// lock timers do in Nomad. A lock without a timer has expired and waits out its delay.
	ttlTimers map[string]*ttlTimer
	// delayTimers are the pending lock-delay timers, stopped by Close.
	delayTimers map[int]func() bool
	nextDelay   int
	closed      bool
}

// New returns an empty store.
func New(cfg Config) *Store {
	s := &Store{
		idx:         cfg.Index,
		now:         cfg.Now,
		acl:         cfg.ACL,
		afterFunc:   cfg.AfterFunc,
		onChange:    cfg.OnChange,
		vars:        map[key]*variable{},
		deleted:     map[key]uint64{},
		ttlTimers:   map[string]*ttlTimer{},
		delayTimers: map[int]func() bool{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.afterFunc == nil {
		s.afterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return s
}

// Close stops every lock timer. Locks held then are kept as they are.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for id, t := range s.ttlTimers {
		t.stop()
		delete(s.ttlTimers, id)
	}
	for id, stop := range s.delayTimers {
		stop()
		delete(s.delayTimers, id)
	}
}

func (v *variable) wire(withLock bool) *varJSON {
	return &varJSON{metaJSON: v.meta(withLock), Items: copyItems(v.items)}
}

func (v *variable) meta(withLock bool) metaJSON {
	out := metaJSON{
		Namespace: v.namespace, Path: v.path,
		CreateIndex: v.createIndex, CreateTime: v.createTime,
		ModifyIndex: v.modifyIndex, ModifyTime: v.modifyTime,
	}
	if withLock {
		out.Lock = v.lock.wire()
	}
	return out
}

func copyItems(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// newUUID returns a random UUID in Nomad's format, for lock IDs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
