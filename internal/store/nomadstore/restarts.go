// Package nomadstore keeps restart and fleet records in Nomad Variables (the store.Store
// and store.Fleets of a cluster: any machine can attach, steer or resume), lists them for
// an agent's discovery (Lister), and probes whether a token may keep them there (Probe).
// Every store here is built on the *nomadvars.Client its caller hands in: the one layer
// that reads and writes variables, with its retries and typed errors.
package nomadstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Options configure the Nomad Variables store.
type Options struct {
	// Prefix is the root of every variable the store writes; default "nomad-restart".
	// Operators grant the store's ACL on "<Prefix>/*".
	Prefix string
	// LockTTL is the lease's time to live (default nomadvars.DefaultLockTTL, 15s); Nomad accepts
	// 10s to 24h. The lease renews itself at half of it.
	LockTTL time.Duration
	// LockDelay is how long after a lease expired (its driver died) before another driver
	// may take it (default nomadvars.DefaultLockDelay, 15s, Nomad's own default). An explicit
	// release frees the lease at once.
	LockDelay time.Duration
	// RenewEvery is how often a held lease is renewed: default LockTTL/2. A simulated
	// cluster whose clock runs faster than real time needs it shorter (LockTTL/2 divided by
	// the time scale); renewals failing for 2×RenewEvery mean the lease is lost.
	RenewEvery time.Duration
	// Keep is how many ended restarts of each job are kept; older ones are deleted when a
	// new restart of the job is created. 0 means DefaultKeep (20); negative keeps them all.
	Keep int
	// Logger receives the lease's renewal troubles; default slog.Default().
	Logger *slog.Logger
	// SharedWatch makes every concurrent Watch and WatchHead of this handle share one
	// blocking list query per namespace on Prefix (see hub.go), instead of one
	// blocking read each: a process driving many restarts at once then holds a few
	// connections to Nomad, which caps each client address's concurrent connections
	// (limits.http_max_conns_per_client, 100 by default).
	SharedWatch bool
	// SharedWatchGap is the least time between two list queries of a shared watch; default
	// DefaultSharedWatchGap (250ms).
	SharedWatchGap time.Duration
}

// Restarts keeps restart records in Nomad Variables, in the job's namespace:
//
//	<prefix>/<job>/<id>            the record's head (see codec.go)
//	<prefix>/<job>/<id>/c/<name>   its chunks when it passes 64 KiB
//	<prefix>/<job>/<id>/lease      the driver's lease (a variable lock)
//	<prefix>/<job>/<id>/control    the control bell, rung by steering (control.go)
//	<prefix>/<job>/active          the ID of the job's restart in progress
//
// Every write of a head is a check-and-set on its ModifyIndex, and Watch is a blocking
// query on the head. A handle caches chunks it has read (they never change under one
// name) and where each restart lives, so a reader of a big record fetches the head and the
// few chunks that changed.
type Restarts struct {
	// vars reads and writes the variables; watching is vars for the watch loops, which
	// pace their own tries.
	vars     *nomadvars.Client
	watching *nomadvars.Client
	opts     Options

	mu sync.Mutex
	// where maps namespace/id to the record's job path segment.
	where map[string]string
	// heads holds the chunk names and contents of the latest head seen per namespace/id.
	heads map[string]*cachedHead
	// fitting holds the hashes of big chunks known to fit in a variable once packed.
	fitting map[string]bool
	// memos holds, per namespace/id, the encoding of the allocations last written.
	memos map[string]*allocMemo
	gzips gzipPool
	// hubs are the shared watches (SharedWatch), one per namespace.
	hubs hubSet
	// endedHere holds the namespace/id of records this handle ended (wrote terminal): their
	// lease is dropped on release without reading the record again. Each key is stored once
	// and taken once (LoadAndDelete), so it needs no share of mu.
	endedHere sync.Map
	// claimed holds, per namespace/id of a record this handle created, the ModifyIndex of
	// the job's marker as its claim wrote it: the record's end deletes the marker at that
	// index without reading it first.
	claimed map[string]uint64
}

func (n *Restarts) pack(raw []byte) (string, error) { return n.gzips.pack(raw) }

func (n *Restarts) fits(hash string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fitting[hash]
}

func (n *Restarts) setFits(hash string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.fitting) > 100000 { // bound the memory of a long-running agent
		clear(n.fitting)
	}
	n.fitting[hash] = true
}

type cachedHead struct {
	modifyIndex uint64
	names       []string
	raws        map[string][]byte // by chunk name
	carried     map[string]string // the chunks the head carries: packed data by name
}

var _ store.Store = (*Restarts)(nil)

// NewRestarts returns a store on vars's cluster.
func NewRestarts(vars *nomadvars.Client, opts Options) *Restarts {
	if opts.Prefix == "" {
		opts.Prefix = "nomad-restart"
	}
	opts.Prefix = strings.Trim(opts.Prefix, "/")
	if opts.LockTTL == 0 {
		opts.LockTTL = nomadvars.DefaultLockTTL
	}
	// Nomad refuses TTLs outside [10s, 24h]; clamp rather than fail every lease later.
	opts.LockTTL = min(max(opts.LockTTL, 10*time.Second), 24*time.Hour)
	if opts.LockDelay == 0 {
		opts.LockDelay = nomadvars.DefaultLockDelay
	}
	if opts.RenewEvery <= 0 {
		opts.RenewEvery = opts.LockTTL / 2
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SharedWatchGap <= 0 {
		opts.SharedWatchGap = DefaultSharedWatchGap
	}
	return &Restarts{vars: vars, watching: vars.Watching(), opts: opts, where: map[string]string{}, heads: map[string]*cachedHead{}, fitting: map[string]bool{},
		memos: map[string]*allocMemo{}}
}

// Kind implements store.Store.
func (n *Restarts) Kind() string { return "nomad" }

// Prefix is the root of the store's variables.
func (n *Restarts) Prefix() string { return n.opts.Prefix }

// jobSegment is the job's path segment: escaped, and short enough that the longest path
// (prefix/job/id/c/chunk-name) stays within Nomad's 128 characters.
func (n *Restarts) jobSegment(job string) string {
	return nomadvars.EscapeSegment(job, max(16, 128-len(n.opts.Prefix)-1-1-36-3-26))
}

func (n *Restarts) headPath(jobSeg, id string) string { return n.opts.Prefix + "/" + jobSeg + "/" + id }
func (n *Restarts) markerPath(job string) string {
	return n.opts.Prefix + "/" + n.jobSegment(job) + "/active"
}

func key(ns, id string) string { return ns + "\x00" + id }

// headRef is a record's head variable as found in a listing.
type headRef struct {
	ns, jobSeg, id string
}

// listHeads lists the heads of records in ns ("*" for all) whose job segment is jobSeg
// ("" for all). It learns where each record lives.
func (n *Restarts) listHeads(ctx context.Context, ns, jobSeg string) ([]headRef, error) {
	prefix := n.opts.Prefix + "/"
	if jobSeg != "" {
		prefix += jobSeg + "/"
	}
	metas, err := n.vars.List(ctx, ns, prefix)
	if err != nil {
		return nil, n.storeErr(err)
	}
	var out []headRef
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range metas {
		parts := strings.Split(strings.TrimPrefix(m.Path, n.opts.Prefix+"/"), "/")
		// A reserved first segment is a directory of the project's own (schedules, fleets),
		// never a job's.
		if len(parts) != 2 || nomadvars.Reserved(parts[0]) || parts[1] == "active" || !store.ValidID(parts[1]) {
			continue
		}
		h := headRef{ns: m.Namespace, jobSeg: parts[0], id: parts[1]}
		n.where[key(h.ns, h.id)] = h.jobSeg
		out = append(out, h)
	}
	return out, nil
}

// locate finds the namespace and job segment of restart id.
func (n *Restarts) locate(ctx context.Context, ns, id string) (headRef, error) {
	if !store.ValidID(id) {
		return headRef{}, store.ErrNotFound
	}
	if !store.AllNamespaces(ns) {
		n.mu.Lock()
		seg, ok := n.where[key(ns, id)]
		n.mu.Unlock()
		if ok {
			return headRef{ns: ns, jobSeg: seg, id: id}, nil
		}
	}
	listNS := ns
	if store.AllNamespaces(ns) {
		listNS = "*"
	}
	heads, err := n.listHeads(ctx, listNS, "")
	if err != nil {
		return headRef{}, err
	}
	for _, h := range heads {
		if h.id == id {
			return h, nil
		}
	}
	return headRef{}, store.ErrNotFound
}

// readHead reads a head variable.
func (n *Restarts) readHead(ctx context.Context, h headRef) (*nomadvars.Variable, error) {
	v, err := n.vars.Read(ctx, h.ns, n.headPath(h.jobSeg, h.id))
	return v, n.storeErr(err)
}

// watchHeadOnce is one read of a head for a watch loop, which paces its own tries: with
// waitIndex > 0 a blocking query. It also returns the query's index.
func (n *Restarts) watchHeadOnce(ctx context.Context, h headRef, waitIndex uint64) (*nomadvars.Variable, uint64, error) {
	v, index, err := n.watching.ReadAfter(ctx, h.ns, n.headPath(h.jobSeg, h.id), nomadvars.Wait{After: waitIndex, Time: headWatchWait})
	return v, index, n.storeErr(err)
}

// headWatchWait is each blocking read's wait.
const headWatchWait = 5 * time.Minute

// load turns a head variable into the whole record, reading the chunks it does not have.
// errChunkGone says a chunk vanished: a newer head exists; read again.
func (n *Restarts) load(ctx context.Context, h headRef, v *nomadvars.Variable) (*restart.Record, error) {
	rec, names, err := decodeHead(v.Items)
	if err != nil {
		return nil, fmt.Errorf("nomad store: restart %s: %w", h.id, err)
	}
	k := key(h.ns, h.id)
	n.mu.Lock()
	old := n.heads[k]
	n.mu.Unlock()
	raws := make([][]byte, len(names))
	var missing []int
	var carried map[string]string
	for i, name := range names {
		data, inHead := v.Items[itemChunkData+name]
		if inHead {
			if carried == nil {
				carried = map[string]string{}
			}
			carried[name] = data
		}
		switch {
		case old != nil && old.raws[name] != nil:
			raws[i] = old.raws[name]
		case inHead:
			if raws[i], err = unpack(data); err != nil {
				return nil, fmt.Errorf("nomad store: chunk %s of restart %s is corrupt: %w", name, h.id, err)
			}
		default:
			missing = append(missing, i)
		}
	}
	err = forEach(ctx, len(missing), chunkWorkers, func(ctx context.Context, j int) error {
		i := missing[j]
		path := n.headPath(h.jobSeg, h.id) + "/c/" + names[i]
		cv, err := n.vars.Read(ctx, h.ns, path)
		if err != nil {
			err = n.storeErr(err)
			if errors.Is(err, store.ErrNotFound) {
				return errChunkGone
			}
			return err
		}
		if raws[i], err = unpack(cv.Items[itemData]); err != nil {
			return fmt.Errorf("nomad store: chunk %s of restart %s is corrupt: %w", names[i], h.id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	fresh := make(map[string][]byte, len(names))
	for i, name := range names {
		fresh[name] = raws[i]
	}
	if err := assemble(rec, names, raws); err != nil {
		return nil, fmt.Errorf("nomad store: restart %s: %w", h.id, err)
	}
	rec.Namespace = v.Namespace
	rec.CreateIndex, rec.ModifyIndex = v.CreateIndex, v.ModifyIndex
	n.remember(k, h.jobSeg, v.ModifyIndex, names, fresh, carried)
	return rec, nil
}

var errChunkGone = errors.New("a chunk of the record was replaced while reading")

func (n *Restarts) remember(k, jobSeg string, modifyIndex uint64, names []string, raws map[string][]byte, carried map[string]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.where[k] = jobSeg
	if cur := n.heads[k]; cur != nil && cur.modifyIndex > modifyIndex {
		return // a newer head is already known
	}
	n.heads[k] = &cachedHead{modifyIndex: modifyIndex, names: names, raws: raws, carried: carried}
}

// getAt reads the whole record at h, retrying when a writer replaced chunks under it.
func (n *Restarts) getAt(ctx context.Context, h headRef) (*restart.Record, error) {
	for attempt := 0; ; attempt++ {
		v, err := n.readHead(ctx, h)
		if err != nil {
			return nil, err
		}
		rec, err := n.load(ctx, h, v)
		if errors.Is(err, errChunkGone) && attempt < 20 {
			continue
		}
		return rec, err
	}
}

// Get implements store.Store. With namespace "" or "*" it looks in every namespace.
func (n *Restarts) Get(ctx context.Context, namespace, id string) (*restart.Record, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	rec, err := n.getAt(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		n.forget(h)
	}
	return rec, err
}

func (n *Restarts) forget(h headRef) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.where, key(h.ns, h.id))
	delete(n.heads, key(h.ns, h.id))
}

// Find implements store.Store.
func (n *Restarts) Find(ctx context.Context, namespace, prefix string) (*restart.Record, error) {
	listNS := namespace
	if store.AllNamespaces(namespace) {
		listNS = "*"
	}
	heads, err := n.listHeads(ctx, listNS, "")
	if err != nil {
		return nil, err
	}
	return nomadvars.FindByIDPrefix(heads, func(h headRef) string { return h.id }, prefix, store.ErrNotFound,
		func(ids []string) error { return &store.AmbiguousIDError{Prefix: prefix, Matches: ids} },
		func(h headRef) (*restart.Record, error) { return n.getAt(ctx, h) })
}

// List implements store.Store.
func (n *Restarts) List(ctx context.Context, f store.Filter) ([]*restart.Record, error) {
	listNS := f.Namespace
	if store.AllNamespaces(listNS) {
		listNS = "*"
	}
	jobSeg := ""
	if f.JobID != "" {
		jobSeg = n.jobSegment(f.JobID)
	}
	heads, err := n.listHeads(ctx, listNS, jobSeg)
	if err != nil {
		return nil, err
	}
	return store.ReadKept(ctx, heads, f, n.getAt)
}
