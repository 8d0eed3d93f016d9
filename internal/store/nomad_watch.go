package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Watch implements Store with blocking queries on the record's head. A watch is a long
// wait, so passing failures (a leader election, a restarted server) do not end it: it
// keeps trying, backing off up to watchMaxBackoff, until ctx ends.
func (n *Nomad) Watch(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	return n.watch(ctx, namespace, id, afterIndex, true)
}

// WatchHead implements Store: the blocking query of Watch, decoding the head variable only
// (no chunk is read or decoded), so a driver woken by its own writes pays for the head alone.
func (n *Nomad) WatchHead(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	return n.watch(ctx, namespace, id, afterIndex, false)
}

func (n *Nomad) watch(ctx context.Context, namespace, id string, afterIndex uint64, whole bool) (*restart.Record, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	var wait uint64
	backoff := 50 * time.Millisecond
	for {
		v, qm, err := n.readHead(ctx, h, wait)
		if err != nil && transient(err) {
			n.opts.Logger.Debug("watching a restart record: retrying", "restart", id, "error", err)
			if serr := sleepCtx(ctx, backoff); serr != nil {
				return nil, serr
			}
			backoff = min(2*backoff, watchMaxBackoff)
			continue
		}
		if err != nil {
			return nil, err
		}
		backoff = 50 * time.Millisecond
		if v.ModifyIndex > afterIndex && !whole {
			rec, _, err := decodeHead(v.Items)
			if err != nil {
				return nil, fmt.Errorf("nomad store: restart %s: %w", h.id, err)
			}
			rec.Namespace = v.Namespace
			rec.CreateIndex, rec.ModifyIndex = v.CreateIndex, v.ModifyIndex
			return rec, nil
		}
		if v.ModifyIndex > afterIndex {
			rec, err := n.load(ctx, h, v)
			if errors.Is(err, errChunkGone) {
				wait = 0 // a newer head exists: read it at once
				continue
			}
			return rec, err
		}
		wait = max(afterIndex, v.ModifyIndex, wait)
		if qm != nil && qm.LastIndex > wait {
			wait = qm.LastIndex
		}
	}
}

// watchMaxBackoff caps the wait between a failing watch's tries.
const watchMaxBackoff = 2 * time.Second
