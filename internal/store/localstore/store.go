// Package localstore keeps restart records in files on this machine (a store.Store for
// operators whose token may not write Nomad Variables), shared by the processes of one user.
package localstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Store keeps restart records as JSON files under one directory, for operators whose token
// may not write Nomad Variables. Several processes on one machine may share a directory:
// every read-modify-write runs under an exclusive file lock, every file is replaced
// atomically, and leases are file locks held by the driving process, so the kernel frees
// them the instant that process dies.
//
// Layout under dir:
//
//	store.lock                         the lock of every check-and-set
//	index                              the store's last ModifyIndex
//	records/<namespace>/<id>.json      one record per restart
//	active/<namespace>/<job>           the ID of the job's restart in progress, for
//	                                   records stamped with no cluster
//	active/<namespace>/@<cluster>/<job>  the same for one cluster (a hash of its address):
//	                                   one directory serves every cluster an operator uses,
//	                                   and job "web" busy on one does not hold "web" on another
//	leases/<namespace>/<id>.lock       held (flock) by the restart's driver
type Store struct {
	dir string
	// mu serializes this process's critical sections; the file lock serializes processes.
	// Both are needed: a flock taken twice through one descriptor does not exclude.
	mu   sync.Mutex
	lock *flock.Flock
	now  func() time.Time

	// metas remembers the indexes of record files this handle last wrote or read, keyed
	// by path and valid while the file is the same (inode, size, mtime): an Update of a
	// 10,000-allocation record then need not decode the whole file to check its index.
	metaMu sync.Mutex
	metas  map[string]fileMeta
}

// fileMeta is what an Update must know of the stored version of a record.
type fileMeta struct {
	fi          os.FileInfo
	CreateIndex uint64
	ModifyIndex uint64
	JobID       string
}

var _ store.Store = (*Store)(nil)

// DefaultDir is where the local store lives unless told otherwise:
// $XDG_STATE_HOME/nomad-restart, else ~/.local/state/nomad-restart. The caller hands in the
// two variables' values (the command line reads its environment; nothing below it does).
func DefaultDir(xdgStateHome, home string) (string, error) {
	if xdgStateHome != "" && filepath.IsAbs(xdgStateHome) {
		return filepath.Join(xdgStateHome, "nomad-restart"), nil
	}
	if home == "" {
		return "", errors.New("finding the local state directory: $HOME is not defined (set XDG_STATE_HOME or HOME)")
	}
	return filepath.Join(home, ".local", "state", "nomad-restart"), nil
}

// New opens (creating it if needed) a local store in dir.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("local store: no directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local store: resolving %s: %w", dir, err)
	}
	for _, sub := range []string{"records", "active", "leases"} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o700); err != nil {
			return nil, fmt.Errorf("local store: creating %s: %w (check the directory's permissions or choose another with -state-dir)", filepath.Join(abs, sub), err)
		}
	}
	return &Store{
		dir:   abs,
		lock:  flock.New(filepath.Join(abs, "store.lock"), flock.SetPermissions(0o600)),
		now:   time.Now,
		metas: map[string]fileMeta{},
	}, nil
}

// Dir is the store's directory.
func (l *Store) Dir() string { return l.dir }

// Kind implements store.Store.
func (l *Store) Kind() string { return "local" }

func (l *Store) recordPath(ns, id string) string {
	return filepath.Join(l.dir, "records", nomadvars.EscapeSegment(nomadvars.Namespace(ns), 0), id+".json")
}

// markerPath is where the ID of the job's restart in progress on cluster lives. "@" is
// escaped in a job's segment, so a cluster's directory never meets a job's marker.
func (l *Store) markerPath(cluster, ns, job string) string {
	dir := filepath.Join(l.dir, "active", nomadvars.EscapeSegment(nomadvars.Namespace(ns), 0))
	if cluster != "" {
		sum := sha256.Sum256([]byte(cluster))
		dir = filepath.Join(dir, "@"+hex.EncodeToString(sum[:8]))
	}
	return filepath.Join(dir, nomadvars.EscapeSegment(job, 200))
}

// markerPaths are the markers that may hold the job on cluster: its own, and the one of
// records stamped with no cluster (written before records named their cluster), which
// are every cluster's.
func (l *Store) markerPaths(cluster, ns, job string) []string {
	if cluster == "" {
		return []string{l.markerPath("", ns, job)}
	}
	return []string{l.markerPath(cluster, ns, job), l.markerPath("", ns, job)}
}

func (l *Store) leasePath(ns, id string) string {
	return filepath.Join(l.dir, "leases", nomadvars.EscapeSegment(nomadvars.Namespace(ns), 0), id+".lock")
}

// locked runs fn holding the store's lock, in this process and across processes.
func (l *Store) locked(ctx context.Context, fn func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	// The critical sections are a few small file operations, so a blocking flock is
	// cheaper and fairer than polling with TryLock.
	if err := l.lock.Lock(); err != nil {
		return fmt.Errorf("local store: locking %s: %w", l.lock.Path(), err)
	}
	defer func() { _ = l.lock.Unlock() }()
	return fn()
}

// nextIndex advances the store's index. Call it under the lock.
func (l *Store) nextIndex() (uint64, error) {
	p := filepath.Join(l.dir, "index")
	var cur uint64
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, fmt.Errorf("local store: reading %s: %w", p, err)
	default:
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &cur); err != nil {
			return 0, fmt.Errorf("local store: %s is corrupt (%q): %w", p, b, err)
		}
	}
	cur++
	if err := writeFileAtomic(p, []byte(fmt.Sprintf("%d\n", cur))); err != nil {
		return 0, err
	}
	return cur, nil
}

func (l *Store) readRecord(path string) (*restart.Record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("local store: reading %s: %w", path, err)
	}
	var rec restart.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("local store: %s is not a restart record: %w", path, err)
	}
	return &rec, nil
}

func (l *Store) writeRecord(rec *restart.Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("local store: encoding restart %s: %w", rec.ID, err)
	}
	p := l.recordPath(rec.Namespace, rec.ID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("local store: %w", err)
	}
	if err := writeFileAtomic(p, b); err != nil {
		return err
	}
	if fi, err := os.Stat(p); err == nil {
		l.metaMu.Lock()
		l.metas[p] = fileMeta{fi: fi, CreateIndex: rec.CreateIndex, ModifyIndex: rec.ModifyIndex, JobID: rec.JobID}
		l.metaMu.Unlock()
	}
	return nil
}

// readMeta returns the indexes of the stored record at path, from memory when the file
// has not changed since this handle saw it, else by a light decode that skips the plan.
func (l *Store) readMeta(path string) (fileMeta, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileMeta{}, store.ErrNotFound
	}
	if err != nil {
		return fileMeta{}, fmt.Errorf("local store: %w", err)
	}
	l.metaMu.Lock()
	m, ok := l.metas[path]
	l.metaMu.Unlock()
	if ok && os.SameFile(m.fi, fi) && m.fi.ModTime().Equal(fi.ModTime()) && m.fi.Size() == fi.Size() {
		return m, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileMeta{}, store.ErrNotFound
	}
	if err != nil {
		return fileMeta{}, fmt.Errorf("local store: reading %s: %w", path, err)
	}
	m = fileMeta{fi: fi}
	if err := json.Unmarshal(b, &m); err != nil {
		return fileMeta{}, fmt.Errorf("local store: %s is not a restart record: %w", path, err)
	}
	return m, nil
}

// jobBusy returns the ID of the job's restart in progress on cluster, or "". A marker
// naming a record that is missing, terminal or another cluster's is free: its writer
// crashed, its end cleared it late, or it holds the job elsewhere.
func (l *Store) jobBusy(cluster, ns, job string) (string, error) {
	for _, m := range l.markerPaths(cluster, ns, job) {
		id, err := l.busyMarker(m, cluster, ns, job)
		if id != "" || err != nil {
			return id, err
		}
	}
	return "", nil
}

// busyMarker reads marker m: the ID of a restart of job on cluster in progress, or "".
func (l *Store) busyMarker(m, cluster, ns, job string) (string, error) {
	b, err := os.ReadFile(m)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("local store: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !store.ValidID(id) {
		return "", nil
	}
	rec, err := l.readRecord(l.recordPath(ns, id))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if rec.Status.Terminal() || rec.JobID != job || rec.Cluster != "" && cluster != "" && rec.Cluster != cluster {
		return "", nil
	}
	return id, nil
}

// Create implements store.Store.
func (l *Store) Create(ctx context.Context, rec *restart.Record) error {
	_, err := l.create(ctx, rec, false, "")
	return err
}

// CreateLeased implements store.Store: the lease's file lock is taken for holder within the
// store's lock, before the record is written, so that no reader finds the record with its
// lease free. A process that dies between the two leaves a lease file without a record,
// whose lock the kernel freed; the next creation in its namespace deletes it.
func (l *Store) CreateLeased(ctx context.Context, rec *restart.Record, holder string) (store.Lease, error) {
	lease, err := l.create(ctx, rec, true, holder)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// create is Create, and with leased CreateLeased.
func (l *Store) create(ctx context.Context, rec *restart.Record, leased bool, holder string) (*localLease, error) {
	if err := store.PrepareNew("local store", rec); err != nil {
		return nil, err
	}
	rec.Namespace = nomadvars.Namespace(rec.Namespace)
	defer func() {
		if rec.CreateIndex != 0 {
			l.prune(ctx, rec.Namespace, rec.JobID)
		}
	}()
	var lease *localLease
	err := l.locked(ctx, func() error {
		p := l.recordPath(rec.Namespace, rec.ID)
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("local store: restart %s: %w", rec.ID, store.ErrExists)
		}
		if !rec.Status.Terminal() {
			busy, err := l.jobBusy(rec.Cluster, rec.Namespace, rec.JobID)
			if err != nil {
				return err
			}
			if busy != "" {
				return &store.JobBusyError{Namespace: rec.Namespace, JobID: rec.JobID, RestartID: busy}
			}
		}
		if leased {
			var err error
			if lease, err = l.lockLease(rec.Namespace, rec.ID, holder); err != nil {
				if errors.Is(err, store.ErrLeaseHeld) {
					return fmt.Errorf("local store: restart %s: another process holds its lease: %w", rec.ID, store.ErrExists)
				}
				return err
			}
		}
		err := l.writeNew(rec)
		if err != nil && lease != nil {
			lease.drop()
			lease = nil
		}
		return err
	})
	return lease, err
}

// writeNew writes new record rec and its job's marker; call it under the lock.
func (l *Store) writeNew(rec *restart.Record) error {
	idx, err := l.nextIndex()
	if err != nil {
		return err
	}
	now := l.now()
	out := *rec
	out.CreateIndex, out.ModifyIndex = idx, idx
	store.StampTimes(&out.CreateTime, &out.ModifyTime, now)
	// The marker goes first: a crash between the two writes leaves a marker naming a
	// missing record, which counts as free; the other order could leave two restarts
	// of one job in progress.
	if !rec.Status.Terminal() {
		m := l.markerPath(rec.Cluster, rec.Namespace, rec.JobID)
		if err := os.MkdirAll(filepath.Dir(m), 0o700); err != nil {
			return fmt.Errorf("local store: %w", err)
		}
		if err := writeFileAtomic(m, []byte(rec.ID+"\n")); err != nil {
			return err
		}
	}
	if err := l.writeRecord(&out); err != nil {
		return err
	}
	*rec = out
	return nil
}

// Get implements store.Store. With namespace "" or "*" it looks in every namespace.
func (l *Store) Get(ctx context.Context, namespace, id string) (*restart.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !store.ValidID(id) {
		return nil, store.ErrNotFound
	}
	if store.AllNamespaces(namespace) {
		paths, err := filepath.Glob(filepath.Join(l.dir, "records", "*", id+".json"))
		if err != nil || len(paths) == 0 {
			return nil, store.ErrNotFound
		}
		return l.readRecord(paths[0])
	}
	return l.readRecord(l.recordPath(namespace, id))
}

// recordFiles lists the record files of one namespace, or of all.
func (l *Store) recordFiles(namespace string) ([]string, error) {
	nsDir := "*"
	if !store.AllNamespaces(namespace) {
		nsDir = nomadvars.EscapeSegment(namespace, 0)
	}
	paths, err := filepath.Glob(filepath.Join(l.dir, "records", nsDir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("local store: listing records: %w", err)
	}
	return paths, nil
}

// Find implements store.Store.
func (l *Store) Find(ctx context.Context, namespace, prefix string) (*restart.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	paths, err := l.recordFiles(namespace)
	if err != nil {
		return nil, err
	}
	var matches []string
	for _, p := range paths {
		id := strings.TrimSuffix(filepath.Base(p), ".json")
		if id == prefix {
			return l.readRecord(p)
		}
		if prefix != "" && strings.HasPrefix(id, prefix) {
			matches = append(matches, p)
		}
	}
	switch len(matches) {
	case 0:
		return nil, store.ErrNotFound
	case 1:
		return l.readRecord(matches[0])
	}
	ids := make([]string, len(matches))
	for i, p := range matches {
		ids[i] = strings.TrimSuffix(filepath.Base(p), ".json")
	}
	sort.Strings(ids)
	return nil, &store.AmbiguousIDError{Prefix: prefix, Matches: ids}
}

// List implements store.Store.
func (l *Store) List(ctx context.Context, f store.Filter) ([]*restart.Record, error) {
	paths, err := l.recordFiles(f.Namespace)
	if err != nil {
		return nil, err
	}
	return store.ReadKept(ctx, paths, f, func(_ context.Context, p string) (*restart.Record, error) { return l.readRecord(p) })
}

// Update implements store.Store.
func (l *Store) Update(ctx context.Context, rec *restart.Record) error {
	if !store.ValidID(rec.ID) {
		return store.ErrNotFound
	}
	ns := nomadvars.Namespace(rec.Namespace)
	return l.locked(ctx, func() error {
		cur, err := l.readMeta(l.recordPath(ns, rec.ID))
		if err != nil {
			return err
		}
		if cur.ModifyIndex != rec.ModifyIndex {
			return store.ErrConflict
		}
		if cur.JobID != rec.JobID {
			return fmt.Errorf("local store: restart %s belongs to job %q; its JobID cannot change to %q", rec.ID, cur.JobID, rec.JobID)
		}
		idx, err := l.nextIndex()
		if err != nil {
			return err
		}
		out := *rec
		out.Namespace = ns
		out.CreateIndex = cur.CreateIndex
		out.ModifyIndex = idx
		out.ModifyTime = l.now()
		if err := l.writeRecord(&out); err != nil {
			return err
		}
		if out.Status.Terminal() {
			l.clearMarker(out.Cluster, ns, out.JobID, out.ID)
		}
		rec.Namespace, rec.CreateIndex, rec.ModifyIndex, rec.ModifyTime = out.Namespace, out.CreateIndex, out.ModifyIndex, out.ModifyTime
		return nil
	})
}

// clearMarker frees the job when a marker names id. A failure is harmless: a marker
// naming a terminal record counts as free.
func (l *Store) clearMarker(cluster, ns, job, id string) {
	for _, m := range l.markerPaths(cluster, ns, job) {
		b, err := os.ReadFile(m)
		if err == nil && strings.TrimSpace(string(b)) == id {
			_ = os.Remove(m)
		}
	}
}

// WatchHead implements store.Store: a local record is read whole anyway, so it is Watch.
func (l *Store) WatchHead(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	return l.Watch(ctx, namespace, id, afterIndex)
}

// WatchControl implements store.Store with Watch (store.ControlByWatch): every write wakes
// it, and a wake-up costs a file read, no request to anyone.
func (l *Store) WatchControl(ctx context.Context, namespace, id string, token uint64) (*restart.Record, uint64, error) {
	return store.ControlByWatch(ctx, l, namespace, id, token)
}

// Ring implements store.Store: Watch sees every write already.
func (l *Store) Ring(context.Context, string, string) error { return nil }

// Watch implements store.Store. There is no server to block on, so it watches the record file
// with a cheap stat, at an interval that starts short (a driver obeys a pause or cancel
// promptly) and backs off while nothing changes.
func (l *Store) Watch(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	const (
		minInterval = 5 * time.Millisecond
		maxInterval = 250 * time.Millisecond
	)
	var (
		path     string
		last     os.FileInfo
		interval = minInterval
	)
	for {
		if path == "" {
			rec, err := l.Get(ctx, namespace, id)
			if err != nil {
				return nil, err
			}
			path = l.recordPath(rec.Namespace, rec.ID)
		}
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, store.ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("local store: watching %s: %w", path, err)
		}
		if last == nil || !os.SameFile(fi, last) || !fi.ModTime().Equal(last.ModTime()) || fi.Size() != last.Size() {
			last = fi
			rec, err := l.readRecord(path)
			if err != nil {
				return nil, err
			}
			if rec.ModifyIndex > afterIndex {
				return rec, nil
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		interval = min(interval*3/2, maxInterval)
	}
}
