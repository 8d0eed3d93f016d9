package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Create implements Store. The head is written first and the job's marker claimed second:
// a marker then never names a record that does not exist yet, so a marker naming a missing
// record can safely count as free.
func (n *Nomad) Create(ctx context.Context, rec *restart.Record) error {
	if rec.ID == "" {
		rec.ID = uuid.NewString()
	}
	if !validID(rec.ID) {
		return fmt.Errorf("nomad store: invalid restart ID %q", rec.ID)
	}
	if rec.JobID == "" {
		return errors.New("nomad store: a restart record needs a JobID")
	}
	out := *rec
	out.Namespace = normNamespace(rec.Namespace)
	now := time.Now().UTC()
	if out.CreateTime.IsZero() {
		out.CreateTime = now
	}
	out.ModifyTime = now
	h := headRef{ns: out.Namespace, jobSeg: n.jobSegment(out.JobID), id: out.ID}

	enc, err := encodeRecord(&out, n, n.memoFor(key(out.Namespace, out.ID)))
	if err != nil {
		return fmt.Errorf("nomad store: %w", err)
	}
	if err := n.writeChunks(ctx, h, enc, nil); err != nil {
		return err
	}
	items, err := headItems(enc)
	if err != nil {
		n.deleteChunks(ctx, h, enc.chunks)
		return fmt.Errorf("nomad store: %w", err)
	}
	path := n.headPath(h.jobSeg, h.id)
	v, err := n.writeHead(ctx, h, items, 0)
	if err != nil {
		n.deleteChunks(ctx, h, enc.chunks)
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return fmt.Errorf("nomad store: restart %s already exists", out.ID)
		}
		return n.mapErr(ctx, err, "write", h.ns, path)
	}
	if !out.Status.Terminal() {
		if err := n.claimJob(ctx, h, out.JobID); err != nil {
			// Undo the head: this restart never existed.
			cctx, cancel := cleanupContext(ctx)
			_, derr := n.client.Variables().CheckedDelete(path, v.ModifyIndex, n.wo(cctx, h.ns))
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
	n.prune(ctx, out.Namespace, out.JobID)
	return nil
}

// claimJob makes restart h the job's restart in progress, or returns *JobBusyError.
func (n *Nomad) claimJob(ctx context.Context, h headRef, job string) error {
	path := n.markerPath(job)
	vars := n.client.Variables()
	items := map[string]string{"restart": h.id}
	for attempt := 0; attempt < 20; attempt++ {
		_, _, err := vars.CheckedCreate(&api.Variable{Namespace: h.ns, Path: path, Items: items}, n.wo(ctx, h.ns))
		if err == nil {
			return nil
		}
		var conflict api.ErrCASConflict
		if transient(err) && attempt < 19 {
			// Try again: if this write landed, the next one meets our own marker.
			if serr := sleepCtx(ctx, time.Duration(attempt+1)*20*time.Millisecond); serr != nil {
				return serr
			}
			continue
		}
		if !errors.As(err, &conflict) {
			return n.mapErr(ctx, err, "write", h.ns, path)
		}
		cur := conflict.Conflict
		if cur == nil || cur.Items["restart"] == "" {
			// A redacted conflict (no read permission) or a zero value: read it.
			err := retry(ctx, func() (err error) {
				cur, _, err = vars.Peek(path, n.qo(ctx, h.ns))
				return err
			})
			if err != nil {
				return n.mapErr(ctx, err, "read", h.ns, path)
			}
			if cur == nil {
				continue // deleted meanwhile: create again
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
			return &JobBusyError{Namespace: h.ns, JobID: job, RestartID: holder}
		}
		// The marker names a finished or missing restart: take it over, with CAS so that
		// of two takers one wins.
		upd := &api.Variable{Namespace: h.ns, Path: path, Items: items, ModifyIndex: cur.ModifyIndex}
		if _, _, err := vars.CheckedUpdate(upd, n.wo(ctx, h.ns)); err == nil {
			return nil
		} else if !errors.As(err, &conflict) && !transient(err) {
			return n.mapErr(ctx, err, "write", h.ns, path)
		}
		// A conflict, or a lost answer: look at the marker again.
	}
	return fmt.Errorf("nomad store: could not claim job %q for restart %s: its marker %s keeps changing", job, h.id, path)
}

// holderBusy reports whether the restart a marker names is still in progress.
func (n *Nomad) holderBusy(ctx context.Context, h headRef) (bool, error) {
	if !validID(h.id) {
		return false, nil
	}
	v, _, err := n.readHead(ctx, h, 0)
	if errors.Is(err, ErrNotFound) {
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
func (n *Nomad) writeChunks(ctx context.Context, h headRef, enc *encodedRecord, old *cachedHead) error {
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
	if !unhurried(ctx) && carried <= maxCarried && carried+headSize(enc) <= maxVariableSize-headSlackBytes {
		for _, c := range place {
			c.carried = true
		}
		return nil
	}
	err := forEach(ctx, len(place), chunkWorkers, func(ctx context.Context, i int) error {
		c := place[i]
		path := n.headPath(h.jobSeg, h.id) + "/c/" + c.name
		err := retry(ctx, func() error {
			v := &api.Variable{Namespace: h.ns, Path: path, Items: map[string]string{itemData: c.packed}}
			_, _, err := n.client.Variables().CheckedCreate(v, n.wo(ctx, h.ns))
			var conflict api.ErrCASConflict
			if errors.As(err, &conflict) {
				// The name is fresh and random (or was carried, never a variable): it exists
				// only because an earlier try of this very write landed and its answer was lost.
				return nil
			}
			return err
		})
		return n.mapErr(ctx, err, "write", h.ns, path)
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
func (n *Nomad) deleteChunks(ctx context.Context, h headRef, chunks []*chunk) {
	names := make([]string, 0, len(chunks))
	for _, c := range chunks {
		if c.name != "" && !c.carried {
			names = append(names, c.name)
		}
	}
	n.deleteChunkNames(ctx, h, names)
}

func (n *Nomad) deleteChunkNames(ctx context.Context, h headRef, names []string) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	for _, name := range names {
		path := n.headPath(h.jobSeg, h.id) + "/c/" + name
		err := retry(ctx, func() error {
			_, err := n.client.Variables().Delete(path, n.wo(ctx, h.ns))
			return err
		})
		if err != nil && statusOf(err) != 404 {
			n.opts.Logger.Debug("could not delete an old chunk of a restart record", "path", path, "namespace", h.ns, "error", err)
		}
	}
}

func (n *Nomad) rememberWrite(h headRef, modifyIndex uint64, enc *encodedRecord) {
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

// Update implements Store.
func (n *Nomad) Update(ctx context.Context, rec *restart.Record) error {
	if !validID(rec.ID) {
		return ErrNotFound
	}
	ns := normNamespace(rec.Namespace)
	h := headRef{ns: ns, jobSeg: n.jobSegment(rec.JobID), id: rec.ID}
	k := key(ns, rec.ID)

	// The chunks of the head being replaced: known from the last read or write when
	// that is the version rec was read at; else read the head (and fail early on a
	// conflict, writing nothing).
	n.mu.Lock()
	old := n.heads[k]
	n.mu.Unlock()
	if old == nil || old.modifyIndex != rec.ModifyIndex {
		v, _, err := n.readHead(ctx, h, 0)
		if err != nil {
			return err
		}
		if v.ModifyIndex != rec.ModifyIndex {
			return ErrConflict
		}
		_, names, err := decodeHead(v.Items)
		if err != nil {
			return fmt.Errorf("nomad store: restart %s: %w", rec.ID, err)
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
	}

	out := *rec
	out.Namespace = ns
	out.ModifyTime = time.Now().UTC()
	enc, err := encodeRecord(&out, n, n.memoFor(k))
	if err != nil {
		return fmt.Errorf("nomad store: %w", err)
	}
	if err := n.writeChunks(ctx, h, enc, old); err != nil {
		return err
	}
	items, err := headItems(enc)
	if err != nil {
		n.deleteChunks(ctx, h, newChunks(enc, old))
		return fmt.Errorf("nomad store: %w", err)
	}
	path := n.headPath(h.jobSeg, h.id)
	v, err := n.writeHead(ctx, h, items, rec.ModifyIndex)
	if err != nil {
		n.deleteChunks(ctx, h, newChunks(enc, old))
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return ErrConflict
		}
		return n.mapErr(ctx, err, "write", ns, path)
	}
	n.rememberWrite(h, v.ModifyIndex, enc)

	// Only now, with no head pointing at them, may the replaced chunks go.
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
		n.dropMemo(k)
		n.releaseJob(ctx, h, out.JobID)
		n.sweepOrphans(ctx, h, v.ModifyIndex, keepNames)
	} else if len(stale) > 0 {
		// Off the writer's path: a driver writes before each batch's requests, and nothing
		// reads a chunk no head names. One lost with the process is swept when the record
		// ends (sweepOrphans).
		go n.deleteChunkNames(context.WithoutCancel(ctx), h, stale)
	}
	rec.Namespace, rec.CreateIndex, rec.ModifyIndex, rec.ModifyTime = ns, v.CreateIndex, v.ModifyIndex, out.ModifyTime
	return nil
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
func (n *Nomad) releaseJob(ctx context.Context, h headRef, job string) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	path := n.markerPath(job)
	var v *api.Variable
	err := retry(ctx, func() (err error) {
		v, _, err = n.client.Variables().Peek(path, n.qo(ctx, h.ns))
		return err
	})
	if err != nil || v == nil || v.Items["restart"] != h.id {
		return
	}
	err = retry(ctx, func() error {
		_, err := n.client.Variables().CheckedDelete(path, v.ModifyIndex, n.wo(ctx, h.ns))
		return err
	})
	if err != nil {
		n.opts.Logger.Debug("could not clear the job's restart marker", "path", path, "namespace", h.ns, "error", err)
	}
}

// sweepOrphans deletes chunks of a finished record that its head does not name: those of
// writers that died between writing chunks and the head. Only chunks older than the final
// head are touched, so a chunk another writer is preparing right now is never removed.
func (n *Nomad) sweepOrphans(ctx context.Context, h headRef, headIndex uint64, keepNames map[string]bool) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	prefix := n.headPath(h.jobSeg, h.id) + "/c/"
	metas, _, err := n.client.Variables().PrefixList(prefix, n.qo(ctx, h.ns))
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

// writeHead writes a head with check-and-set on cas (0: create only). When the answer is
// lost (a dropped connection, a 5xx after the write was applied), it reads the head to
// learn what happened: our content there means the write landed; the old index still
// there means it did not, and it is tried again; anything else is a conflict.
func (n *Nomad) writeHead(ctx context.Context, h headRef, items map[string]string, cas uint64) (*api.Variable, error) {
	path := n.headPath(h.jobSeg, h.id)
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		in := &api.Variable{Namespace: h.ns, Path: path, Items: items, ModifyIndex: cas}
		var (
			v   *api.Variable
			err error
		)
		if cas == 0 {
			v, _, err = n.client.Variables().CheckedCreate(in, n.wo(ctx, h.ns))
		} else {
			v, _, err = n.client.Variables().CheckedUpdate(in, n.wo(ctx, h.ns))
		}
		if err == nil || !transient(err) || attempt >= retryAttempts {
			return v, err
		}
		cur, _, rerr := n.readHead(ctx, h, 0)
		switch {
		case rerr == nil && cur.Items[itemRecord] == items[itemRecord] && cur.Items[itemChunks] == items[itemChunks]:
			return cur, nil // it landed (the record holds its write time: no other writer's is equal)
		case rerr == nil && cur.ModifyIndex != cas:
			return nil, api.ErrCASConflict{CheckIndex: cas, Conflict: cur}
		case errors.Is(rerr, ErrNotFound) && cas != 0:
			return nil, rerr
		case rerr != nil && !errors.Is(rerr, ErrNotFound):
			return nil, err // cannot tell: report the write's own failure
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}
