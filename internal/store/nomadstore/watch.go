package nomadstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Watch implements store.Store with blocking queries on the record's head. A watch is a long
// wait, so passing failures (a leader election, a restarted server: cluster.IsTransient)
// do not end it: it keeps trying, backing off up to watchMaxBackoff, until ctx ends. Its
// requests are tried once each (Nomad.watching): the loop is their only retry.
func (n *Restarts) Watch(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	return n.watch(ctx, namespace, id, afterIndex, true)
}

// WatchHead implements store.Store: the blocking query of Watch, decoding the head variable only
// (no chunk is read or decoded), so a driver woken by its own writes pays for the head alone.
func (n *Restarts) WatchHead(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	return n.watch(ctx, namespace, id, afterIndex, false)
}

func (n *Restarts) watch(ctx context.Context, namespace, id string, afterIndex uint64, whole bool) (*restart.Record, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	if n.opts.SharedWatch {
		return n.watchShared(ctx, h, afterIndex, whole)
	}
	return n.watchBlocking(ctx, h, afterIndex, whole)
}

// watchBlocking follows one head with blocking reads of it.
func (n *Restarts) watchBlocking(ctx context.Context, h headRef, afterIndex uint64, whole bool) (*restart.Record, error) {
	var wait uint64
	backoff := 50 * time.Millisecond
	for {
		v, lastIndex, err := n.watchHeadOnce(ctx, h, wait)
		if err != nil && cluster.IsTransient(err) {
			n.opts.Logger.Debug("watching a restart record: retrying", "restart", h.id, "error", err)
			if !cluster.Sleep(ctx, backoff) {
				return nil, ctx.Err()
			}
			backoff = min(2*backoff, watchMaxBackoff)
			continue
		}
		if err != nil {
			return nil, err
		}
		backoff = 50 * time.Millisecond
		if v.ModifyIndex > afterIndex && !whole {
			return headOnly(h, v)
		}
		if v.ModifyIndex > afterIndex {
			rec, err := n.load(ctx, h, v)
			if errors.Is(err, errChunkGone) {
				wait = 0 // a newer head exists: read it at once
				continue
			}
			return rec, err
		}
		wait = max(afterIndex, v.ModifyIndex, wait, lastIndex)
	}
}

// watchMaxBackoff caps the wait between a failing watch's tries.
const watchMaxBackoff = 2 * time.Second

// headOnly is WatchHead's answer: the record as its head holds it, no chunk read.
func headOnly(h headRef, v *nomadvars.Variable) (*restart.Record, error) {
	rec, _, err := decodeHead(v.Items)
	if err != nil {
		return nil, fmt.Errorf("nomad store: restart %s: %w", h.id, err)
	}
	rec.Namespace = v.Namespace
	rec.CreateIndex, rec.ModifyIndex = v.CreateIndex, v.ModifyIndex
	return rec, nil
}

// watchShared is watch under SharedWatch: it waits on the namespace's hub, and reads the
// head (plainly) only when a listing shows it passed afterIndex or lacks it.
func (n *Restarts) watchShared(ctx context.Context, h headRef, afterIndex uint64, whole bool) (*restart.Record, error) {
	hub := n.hubs.get(n, h.ns)
	w := &hubWaiter{path: n.headPath(h.jobSeg, h.id), after: afterIndex, note: make(chan hubNote, 1)}
	backoff := hubMinBackoff
	for {
		note, err := hub.wait(ctx, w)
		if err != nil {
			return nil, err
		}
		if note.err != nil {
			return nil, note.err
		}
		v, _, err := n.watchHeadOnce(ctx, h, 0)
		switch {
		case errors.Is(err, store.ErrNotFound):
			n.forget(h)
			return nil, store.ErrNotFound
		case err != nil && cluster.IsTransient(err):
			n.opts.Logger.Debug("watching a restart record: retrying", "restart", h.id, "error", err)
			if !cluster.Sleep(ctx, backoff) {
				return nil, ctx.Err()
			}
			backoff = min(2*backoff, watchMaxBackoff)
			w.minGen = note.gen // the listing still says to read: read again
			continue
		case err != nil:
			return nil, err
		}
		backoff = hubMinBackoff
		if v.ModifyIndex <= afterIndex {
			// The listing was older than the head: wait for the next one. (A head the token
			// can read is always listed: Nomad's ACLs grant list with read.)
			w.minGen = note.gen + 1
			continue
		}
		if !whole {
			return headOnly(h, v)
		}
		rec, err := n.load(ctx, h, v)
		if errors.Is(err, errChunkGone) {
			w.minGen = note.gen // a newer head exists: read it at once
			continue
		}
		return rec, err
	}
}
