package engine

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// memStore is an in-memory Store for fast unit tests: records are kept as JSON (so no caller
// shares memory with the store), writes are check-and-set on ModifyIndex, Watch wakes on
// every write, and a lease is a flag per record.
type memStore struct {
	mu      sync.Mutex
	index   uint64
	recs    map[string][]byte
	leases  map[string]bool
	changed chan struct{}
}

func newMemStore() *memStore {
	return &memStore{recs: map[string][]byte{}, leases: map[string]bool{}, changed: make(chan struct{})}
}

func (m *memStore) bumpLocked() uint64 {
	m.index++
	close(m.changed)
	m.changed = make(chan struct{})
	return m.index
}

func (m *memStore) load(id string) *restart.Record {
	var r restart.Record
	if err := json.Unmarshal(m.recs[id], &r); err != nil {
		panic(err)
	}
	return &r
}

func (m *memStore) save(r *restart.Record) {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	m.recs[r.ID] = b
}

func (m *memStore) Create(ctx context.Context, rec *restart.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.createLocked(rec)
}

// CreateLeased takes the lease and stores the record in one hold of the store's lock: no
// reader sees the record with its lease free.
func (m *memStore) CreateLeased(ctx context.Context, rec *restart.Record, holder string) (store.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[rec.ID] {
		return nil, store.ErrExists
	}
	if err := m.createLocked(rec); err != nil {
		return nil, err
	}
	m.leases[rec.ID] = true
	return &memLease{m: m, id: rec.ID}, nil
}

func (m *memStore) createLocked(rec *restart.Record) error {
	if _, ok := m.recs[rec.ID]; ok {
		return store.ErrExists
	}
	for id := range m.recs {
		r := m.load(id)
		if r.JobID == rec.JobID && r.Namespace == rec.Namespace && !r.Status.Terminal() {
			return &store.JobBusyError{Namespace: r.Namespace, JobID: r.JobID, RestartID: r.ID}
		}
	}
	idx := m.bumpLocked()
	rec.CreateIndex, rec.ModifyIndex = idx, idx
	m.save(rec)
	return nil
}

func (m *memStore) Get(ctx context.Context, ns, id string) (*restart.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.recs[id]; !ok {
		return nil, store.ErrNotFound
	}
	return m.load(id), nil
}

func (m *memStore) Find(ctx context.Context, ns, prefix string) (*restart.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.recs {
		if strings.HasPrefix(id, prefix) {
			return m.load(id), nil
		}
	}
	return nil, store.ErrNotFound
}

func (m *memStore) List(ctx context.Context, f store.Filter) ([]*restart.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*restart.Record
	for id := range m.recs {
		out = append(out, m.load(id))
	}
	return out, nil
}

func (m *memStore) Update(ctx context.Context, rec *restart.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.recs[rec.ID]; !ok {
		return store.ErrNotFound
	}
	if m.load(rec.ID).ModifyIndex != rec.ModifyIndex {
		return store.ErrConflict
	}
	rec.ModifyIndex = m.bumpLocked()
	rec.ModifyTime = time.Now()
	m.save(rec)
	return nil
}

func (m *memStore) WatchHead(ctx context.Context, ns, id string, after uint64) (*restart.Record, error) {
	return m.Watch(ctx, ns, id, after)
}

// WatchControl is the local store's: every write wakes it.
func (m *memStore) WatchControl(ctx context.Context, ns, id string, token uint64) (*restart.Record, uint64, error) {
	r, err := m.Watch(ctx, ns, id, token)
	if err != nil {
		return nil, 0, err
	}
	return r, r.ModifyIndex, nil
}

func (m *memStore) Ring(context.Context, string, string) error { return nil }

func (m *memStore) Watch(ctx context.Context, ns, id string, after uint64) (*restart.Record, error) {
	for {
		m.mu.Lock()
		if _, ok := m.recs[id]; !ok {
			m.mu.Unlock()
			return nil, store.ErrNotFound
		}
		r := m.load(id)
		ch := m.changed
		m.mu.Unlock()
		if r.ModifyIndex > after {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

type memLease struct {
	m    *memStore
	id   string
	once sync.Once
}

func (l *memLease) Lost() <-chan struct{} { return nil }
func (l *memLease) Release(ctx context.Context) error {
	l.once.Do(func() {
		l.m.mu.Lock()
		defer l.m.mu.Unlock()
		delete(l.m.leases, l.id)
	})
	return nil
}

func (m *memStore) AcquireLease(ctx context.Context, ns, id, holder string) (store.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[id] {
		return nil, store.ErrLeaseHeld
	}
	m.leases[id] = true
	return &memLease{m: m, id: id}, nil
}

func (m *memStore) Kind() string { return "memory" }

// LeaseHolder is not kept: the memory store's leases have no holders' names.
func (m *memStore) LeaseHolder(context.Context, string, string) (string, error) { return "", nil }

// LeaseExpiry: a memory lease ends with its Release, as a local one with its process.
func (m *memStore) LeaseExpiry() (ttl, lockDelay time.Duration) { return 0, 0 }
