package nomadstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Create implements store.Store. The head is written first and the job's marker claimed second:
// a marker then never names a record that does not exist yet, so a marker naming a missing
// record can safely count as free.
func (n *Restarts) Create(ctx context.Context, rec *restart.Record) error {
	if err := store.PrepareNew("nomad store", rec); err != nil {
		return err
	}
	out := *rec
	out.Namespace = nomadvars.Namespace(rec.Namespace)
	store.StampTimes(&out.CreateTime, &out.ModifyTime, time.Now().UTC())
	h := headRef{ns: out.Namespace, jobSeg: n.jobSegment(out.JobID), id: out.ID}

	enc, v, err := n.writeVersion(ctx, h, &out, nil, 0, fmt.Errorf("nomad store: restart %s: %w", out.ID, store.ErrExists))
	if err != nil {
		return err
	}
	path := n.headPath(h.jobSeg, h.id)
	// Retention reads the job's records while the job is claimed: neither waits for the
	// other, and it spares the restart's start a round trip. A refused claim stops it: the
	// restart never existed, and its caller (a fleet waiting for a busy job) retries.
	pctx, stopPrune := context.WithCancel(ctx)
	defer stopPrune()
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		n.prune(pctx, out.Namespace, out.JobID)
	}()
	defer func() { <-pruned }()
	if !out.Status.Terminal() {
		if err := n.claimJob(ctx, h, out.JobID); err != nil {
			stopPrune()
			// Undo the head: this restart never existed.
			cctx, cancel := cleanupContext(ctx)
			derr := n.vars.DeleteAt(cctx, h.ns, path, v.ModifyIndex)
			cancel()
			if derr != nil {
				n.opts.Logger.Warn("could not remove a refused restart record", "path", path, "namespace", h.ns, "error", derr)
			}
			n.deleteChunks(ctx, h, enc.chunks)
			return err
		}
	}
	out.CreateIndex, out.ModifyIndex = v.CreateIndex, v.ModifyIndex
	n.rememberWrite(h, v.ModifyIndex, enc)
	*rec = out
	return nil
}

// leaseHeldRetry is how often CreateLeased tries again a lease held with no record beside
// it: its holder is writing the record, or died before it and the lease expires.
const leaseHeldRetry = 250 * time.Millisecond

// CreateLeased implements store.Store. The lease variable (<record>/lease) is locked for holder
// before the head is written: a listing that shows the head shows its lease held, so an
// agent never takes up a restart whose creator is about to drive it. A lease without its
// head (a creator killed between the two writes) is left out of listings, expires with its
// TTL, and is deleted by the next creation of a restart of the job (see prune). A lease
// another holds with no head beside it is waited for (its holder writes the head, or died
// and the lease expires): ErrExists only when the record exists.
func (n *Restarts) CreateLeased(ctx context.Context, rec *restart.Record, holder string) (store.Lease, error) {
	if err := store.PrepareNew("nomad store", rec); err != nil {
		return nil, err
	}
	ns := nomadvars.Namespace(rec.Namespace)
	h := headRef{ns: ns, jobSeg: n.jobSegment(rec.JobID), id: rec.ID}
	path := n.headPath(h.jobSeg, h.id) + "/lease"
	l, err := n.lockLease(ctx, ns, path, holder, (*nomadLease).dropEndedLease)
	for errors.Is(err, store.ErrLeaseHeld) {
		// Held by another creator of this very record (a fleet's child has a derived ID):
		// its record exists, or comes, or the creator died between its lease and its
		// record (a detach, a kill), and the lease expires within its TTL and lock delay.
		// Only an existing record means another created it.
		if _, rerr := n.readHead(ctx, h); rerr == nil {
			return nil, fmt.Errorf("nomad store: restart %s: another process created it: %w", rec.ID, store.ErrExists)
		} else if !errors.Is(rerr, store.ErrNotFound) {
			return nil, rerr
		}
		if !cluster.Sleep(ctx, leaseHeldRetry) {
			return nil, fmt.Errorf("nomad store: restart %s: another process holds its lease: %w", rec.ID, context.Cause(ctx))
		}
		l, err = n.lockLease(ctx, ns, path, holder, (*nomadLease).dropEndedLease)
	}
	if err != nil {
		return nil, err
	}
	if err := n.Create(ctx, rec); err != nil {
		if !errors.Is(err, store.ErrExists) {
			// No record came of it: nobody will take this lease again.
			l.afterRelease = (*nomadLease).dropReleased
		}
		if rerr := l.Release(ctx); rerr != nil {
			n.opts.Logger.Debug("could not release the lease of a refused restart record; it expires on its own", "path", path, "namespace", ns, "error", rerr)
		}
		return nil, err
	}
	return l, nil
}

// writeVersion writes a version of record out: its chunks that old (nil: none) does not
// hold, then its head with check-and-set at cas. A head that lost the check-and-set is
// conflict. When the head is not written, the chunks just written go again.
func (n *Restarts) writeVersion(ctx context.Context, h headRef, out *restart.Record, old *cachedHead, cas uint64, conflict error) (*encodedRecord, *nomadvars.Variable, error) {
	enc, err := encodeRecord(out, n, n.memoFor(key(h.ns, h.id)))
	if err != nil {
		return nil, nil, fmt.Errorf("nomad store: %w", err)
	}
	if err := n.writeChunks(ctx, h, enc, old); err != nil {
		return nil, nil, err
	}
	items, err := headItems(enc)
	if err != nil {
		n.deleteChunks(ctx, h, newChunks(enc, old))
		return nil, nil, fmt.Errorf("nomad store: %w", err)
	}
	v, err := n.writeHead(ctx, h, items, cas)
	if err != nil {
		n.deleteChunks(ctx, h, newChunks(enc, old))
		var lost *nomadvars.ConflictError
		if errors.As(err, &lost) {
			return nil, nil, conflict
		}
		return nil, nil, n.storeErr(err)
	}
	return enc, v, nil
}

// claimJob makes restart h the job's restart in progress, or returns *JobBusyError.
func (n *Restarts) claimJob(ctx context.Context, h headRef, job string) error {
	path := n.markerPath(job)
	items := map[string]string{"restart": h.id}
	for range 20 {
		// A create whose answer was lost and that landed meets our own marker: nomadvars
		// then says it was written.
		v, err := n.vars.Write(ctx, &nomadvars.Variable{Namespace: h.ns, Path: path, Items: items})
		var conflict *nomadvars.ConflictError
		if err == nil {
			n.rememberClaim(h, v.ModifyIndex)
			return nil
		}
		if !errors.As(err, &conflict) {
			return n.storeErr(err)
		}
		cur := conflict.Current
		if cur == nil {
			continue // deleted meanwhile: create again
		}
		if cur.Items["restart"] == "" {
			// A redacted conflict (no read permission) or a zero value: read it.
			cur, err = n.vars.Read(ctx, h.ns, path)
			if errors.Is(err, nomadvars.ErrNotFound) {
				continue
			}
			if err != nil {
				return n.storeErr(err)
			}
		}
		holder := cur.Items["restart"]
		if holder == h.id {
			return nil
		}
		busy, err := n.holderBusy(ctx, headRef{ns: h.ns, jobSeg: h.jobSeg, id: holder})
		if err != nil {
			return err
		}
		if busy {
			return &store.JobBusyError{Namespace: h.ns, JobID: job, RestartID: holder}
		}
		// The marker names a finished or missing restart: take it over, with CAS so that
		// of two takers one wins.
		upd := &nomadvars.Variable{Namespace: h.ns, Path: path, Items: items, ModifyIndex: cur.ModifyIndex}
		if v, err := n.vars.Write(ctx, upd); err == nil {
			n.rememberClaim(h, v.ModifyIndex)
			return nil
		} else if !errors.As(err, &conflict) {
			return n.storeErr(err)
		}
		// A conflict: look at the marker again.
	}
	return fmt.Errorf("nomad store: could not claim job %q for restart %s: its marker %s keeps changing", job, h.id, path)
}

// holderBusy reports whether the restart a marker names is still in progress.
func (n *Restarts) holderBusy(ctx context.Context, h headRef) (bool, error) {
	if !store.ValidID(h.id) {
		return false, nil
	}
	v, err := n.readHead(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	rec, _, err := decodeHead(v.Items)
	if err != nil {
		return true, fmt.Errorf("nomad store: restart %s named by the job's marker: %w", h.id, err)
	}
	return !rec.Status.Terminal(), nil
}

// writeChunks gives every chunk of enc a place: reusing old's chunk of the same content
// (a variable, or data the old head carried), else a new one. New chunks, with those the
// old head carried, are carried by the new head when they fit in maxCarried: the write is
// then the head's alone. Otherwise, and in an unhurried write (see Unhurried), they all get
// variables (create-only) before the head, which leaves the next write's head room.
func (n *Restarts) writeChunks(ctx context.Context, h headRef, enc *encodedRecord, old *cachedHead) error {
	reuse := map[string]string{}
	if old != nil {
		for _, name := range old.names {
			reuse[chunkKey(name)] = name
		}
	}
	var place []*chunk // chunks that need a place now: new ones, and those the old head carried
	for _, c := range enc.chunks {
		c.carried = false
		if name, ok := reuse[c.key()]; ok {
			c.name = name
			if data, inHead := old.carried[name]; inHead {
				c.packed = data
				place = append(place, c)
			}
			continue
		}
		c.name = c.freshName()
		place = append(place, c)
	}
	carried := 0
	for _, c := range place {
		if c.packed == "" {
			var err error
			if c.packed, err = n.pack(c.raw); err != nil {
				return fmt.Errorf("nomad store: compressing a chunk: %w", err)
			}
		}
		carried += len(itemChunkData) + len(c.name) + len(c.packed)
	}
	if !store.IsUnhurried(ctx) && carried <= maxCarried && carried+headSize(enc) <= maxVariableSize-headSlackBytes {
		for _, c := range place {
			c.carried = true
		}
		return nil
	}
	err := forEach(ctx, len(place), chunkWorkers, func(ctx context.Context, i int) error {
		c := place[i]
		path := n.headPath(h.jobSeg, h.id) + "/c/" + c.name
		_, err := n.vars.Write(ctx, &nomadvars.Variable{Namespace: h.ns, Path: path, Items: map[string]string{itemData: c.packed}})
		var conflict *nomadvars.ConflictError
		if errors.As(err, &conflict) {
			// The name is fresh and random (or was carried, never a variable): it exists
			// only because an earlier try of this very write landed and its answer was lost.
			return nil
		}
		return n.storeErr(err)
	})
	if err != nil {
		// Some may have been written: remove them all (a missing one is no error).
		n.deleteChunks(ctx, h, place)
		return err
	}
	return nil
}

// headSlackBytes is room left in a head for what headSize does not count.
const headSlackBytes = 1024

// headSize is the size of enc's head items without the chunks it may carry.
func headSize(enc *encodedRecord) int {
	n := len(itemFormat) + len(headFormatInner) + len(itemRecord) + len(enc.head) + len(itemChunks)
	for _, c := range enc.chunks {
		n += len(c.name) + 1
	}
	return n
}

// deleteChunks removes chunk variables no head points at; best effort (an orphan costs
// space only, and the record's end sweeps them).
func (n *Restarts) deleteChunks(ctx context.Context, h headRef, chunks []*chunk) {
	names := make([]string, 0, len(chunks))
	for _, c := range chunks {
		if c.name != "" && !c.carried {
			names = append(names, c.name)
		}
	}
	n.deleteChunkNames(ctx, h, names)
}

func (n *Restarts) deleteChunkNames(ctx context.Context, h headRef, names []string) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	for _, name := range names {
		path := n.headPath(h.jobSeg, h.id) + "/c/" + name
		if err := n.vars.Delete(ctx, h.ns, path); err != nil {
			n.opts.Logger.Debug("could not delete an old chunk of a restart record", "path", path, "namespace", h.ns, "error", err)
		}
	}
}

func (n *Restarts) rememberWrite(h headRef, modifyIndex uint64, enc *encodedRecord) {
	names := make([]string, len(enc.chunks))
	raws := make(map[string][]byte, len(enc.chunks))
	var carried map[string]string
	for i, c := range enc.chunks {
		names[i] = c.name
		raws[c.name] = c.raw
		if c.carried {
			if carried == nil {
				carried = map[string]string{}
			}
			carried[c.name] = c.packed
		}
	}
	n.remember(key(h.ns, h.id), h.jobSeg, modifyIndex, names, raws, carried)
}

// Update implements store.Store. It writes the chunks that changed, then the head with
// check-and-set, and only then lets the replaced chunks go.
func (n *Restarts) Update(ctx context.Context, rec *restart.Record) error {
	if !store.ValidID(rec.ID) {
		return store.ErrNotFound
	}
	ns := nomadvars.Namespace(rec.Namespace)
	h := headRef{ns: ns, jobSeg: n.jobSegment(rec.JobID), id: rec.ID}
	old, err := n.replacedHead(ctx, h, rec)
	if err != nil {
		return err
	}

	out := *rec
	out.Namespace = ns
	out.ModifyTime = time.Now().UTC()
	enc, v, err := n.writeVersion(ctx, h, &out, old, rec.ModifyIndex, store.ErrConflict)
	if err != nil {
		return err
	}
	n.rememberWrite(h, v.ModifyIndex, enc)
	n.dropReplaced(ctx, h, &out, v.ModifyIndex, enc, old)
	rec.Namespace, rec.CreateIndex, rec.ModifyIndex, rec.ModifyTime = ns, v.CreateIndex, v.ModifyIndex, out.ModifyTime
	return nil
}

// replacedHead returns the chunks of the head rec replaces: known from the last read or
// write when that is the version rec was read at; else it reads the head (and fails early
// with ErrConflict, writing nothing, when rec is not its version).
func (n *Restarts) replacedHead(ctx context.Context, h headRef, rec *restart.Record) (*cachedHead, error) {
	n.mu.Lock()
	old := n.heads[key(h.ns, h.id)]
	n.mu.Unlock()
	if old != nil && old.modifyIndex == rec.ModifyIndex {
		return old, nil
	}
	v, err := n.readHead(ctx, h)
	if err != nil {
		return nil, err
	}
	if v.ModifyIndex != rec.ModifyIndex {
		return nil, store.ErrConflict
	}
	_, names, err := decodeHead(v.Items)
	if err != nil {
		return nil, fmt.Errorf("nomad store: restart %s: %w", rec.ID, err)
	}
	old = &cachedHead{modifyIndex: v.ModifyIndex, names: names}
	for _, name := range names {
		if data, inHead := v.Items[itemChunkData+name]; inHead {
			if old.carried == nil {
				old.carried = map[string]string{}
			}
			old.carried[name] = data
		}
	}
	return old, nil
}

// dropReplaced deletes the chunks of old that the head just written at headIndex no longer
// names: now, with no head pointing at them, they may go. A record that ended also frees
// its job and sweeps its orphans.
func (n *Restarts) dropReplaced(ctx context.Context, h headRef, out *restart.Record, headIndex uint64, enc *encodedRecord, old *cachedHead) {
	keepNames := map[string]bool{}
	for _, c := range enc.chunks {
		keepNames[c.name] = true
	}
	var stale []string
	for _, name := range old.names {
		if _, inHead := old.carried[name]; !keepNames[name] && !inHead {
			stale = append(stale, name)
		}
	}
	if out.Status.Terminal() {
		// The record will not be written again: its sweep removes the replaced chunks
		// with any orphans, now.
		n.dropMemo(key(h.ns, h.id))
		n.markEnded(key(h.ns, h.id))
		var wg sync.WaitGroup
		wg.Go(func() { n.releaseJob(ctx, h, out.JobID) })
		n.sweepOrphans(ctx, h, headIndex, keepNames)
		wg.Wait()
	} else if len(stale) > 0 {
		// Off the writer's path: a driver writes before each batch's requests, and nothing
		// reads a chunk no head names. One lost with the process is swept when the record
		// ends (sweepOrphans).
		go n.deleteChunkNames(context.WithoutCancel(ctx), h, stale)
	}
}

// newChunks are the chunks of enc that were written for it (not reused from old).
func newChunks(enc *encodedRecord, old *cachedHead) []*chunk {
	had := map[string]bool{}
	if old != nil {
		for _, name := range old.names {
			had[name] = true
		}
	}
	var out []*chunk
	for _, c := range enc.chunks {
		if c.name != "" && !had[c.name] {
			out = append(out, c)
		}
	}
	return out
}

// releaseJob clears the job's marker when it names h. Best effort: a marker naming a
// terminal restart counts as free anyway.
func (n *Restarts) releaseJob(ctx context.Context, h headRef, job string) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	path := n.markerPath(job)
	if index, ok := n.takeClaim(h); ok {
		// Claimed here at index: only a taker that found this restart ended changes the
		// marker since, and the marker is then the taker's to keep.
		if err := n.vars.DeleteAt(ctx, h.ns, path, index); err == nil {
			return
		}
	}
	v, err := n.vars.Read(ctx, h.ns, path)
	if err != nil || v.Items["restart"] != h.id {
		return
	}
	if err := n.vars.DeleteAt(ctx, h.ns, path, v.ModifyIndex); err != nil {
		n.opts.Logger.Debug("could not clear the job's restart marker", "path", path, "namespace", h.ns, "error", err)
	}
}

// sweepOrphans deletes chunks of a finished record that its head does not name: those of
// writers that died between writing chunks and the head. Only chunks older than the final
// head are touched, so a chunk another writer is preparing right now is never removed.
func (n *Restarts) sweepOrphans(ctx context.Context, h headRef, headIndex uint64, keepNames map[string]bool) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	prefix := n.headPath(h.jobSeg, h.id) + "/c/"
	metas, err := n.vars.List(ctx, h.ns, prefix)
	if err != nil {
		return
	}
	var orphans []string
	for _, m := range metas {
		name := strings.TrimPrefix(m.Path, prefix)
		if !keepNames[name] && m.ModifyIndex < headIndex {
			orphans = append(orphans, name)
		}
	}
	n.deleteChunkNames(ctx, h, orphans)
}

// cleanupContext is for work that must finish even when the caller gives up (Ctrl-C
// between writing a head and deleting what it replaced), within a bound of its own.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// writeHead writes a head with check-and-set on cas (0: create only). A write whose answer
// was lost is recognised by nomadvars: the head holds its write time, so no other writer's
// items are equal.
func (n *Restarts) writeHead(ctx context.Context, h headRef, items map[string]string, cas uint64) (*nomadvars.Variable, error) {
	return n.vars.Write(ctx, &nomadvars.Variable{Namespace: h.ns, Path: n.headPath(h.jobSeg, h.id), Items: items, ModifyIndex: cas})
}

// maxClaims bounds the claims a handle remembers: a long-running agent's records that ended
// elsewhere would otherwise pile up; a forgotten claim costs its release a read.
const maxClaims = 10000

// rememberClaim records the index at which this handle wrote the job's marker for h.
func (n *Restarts) rememberClaim(h headRef, index uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.claimed == nil || len(n.claimed) >= maxClaims {
		n.claimed = map[string]uint64{}
	}
	n.claimed[key(h.ns, h.id)] = index
}

// takeClaim returns (once) the index at which this handle claimed the job's marker for h.
func (n *Restarts) takeClaim(h headRef) (uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	index, ok := n.claimed[key(h.ns, h.id)]
	delete(n.claimed, key(h.ns, h.id))
	return index, ok
}
