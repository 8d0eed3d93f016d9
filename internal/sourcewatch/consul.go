package sourcewatch

import (
	"context"
	"fmt"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// consulEntries is one answer of a Consul source: its entries' ModifyIndex values.
type consulEntries []uint64

// runConsul follows one Consul source with blocking queries until ctx ends.
func (h *Hub) runConsul(ctx context.Context, g *group) {
	src := g.key.source
	if err := checkConsulKind(src); err != nil {
		h.consulFailed(g, err)
		<-ctx.Done()
		return
	}
	kv, err := h.consulKV(src.Datacenter)
	for err != nil {
		h.consulFailed(g, err)
		if !cluster.Sleep(ctx, h.slowRetry) {
			return
		}
		kv, err = h.consulKV(src.Datacenter)
	}
	w := &cluster.Watch{What: "watching Consul", Log: h.opts.Logger.With("source", src.String()),
		Policy: cluster.DefaultRetryPolicy(), MinGap: h.opts.MinGap}
	var streak failureStreak
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		entries, got, err := readConsul(ctx, kv, src, index)
		if err != nil {
			if ctx.Err() == nil {
				h.failed(ctx, g, &streak, "Consul", err)
			}
			return 0, err
		}
		streak = failureStreak{}
		h.publish(g, consulAnswer(entries, time.Now()))
		return got, nil
	})
}

// consulKV is the KV client for a datacenter.
func (h *Hub) consulKV(dc string) (*consulapi.KV, error) {
	if h.opts.Consul == nil {
		return nil, ErrNoConsul
	}
	c, err := h.opts.Consul(dc)
	if err != nil {
		return nil, fmt.Errorf("connecting to Consul (datacenter %q): %w", dc, err)
	}
	return c.KV(), nil
}

// readConsul runs one (blocking, when index > 0) read of src: GET /v1/kv/<key>, or
// ?recurse for a prefix. Consul's ?keys form would spare the values, but it answers key
// names only, without the ModifyIndex a change is told by.
func readConsul(ctx context.Context, kv *consulapi.KV, src onchange.Source, index uint64) (consulEntries, uint64, error) {
	q := (&consulapi.QueryOptions{
		Datacenter: src.Datacenter, Namespace: src.Namespace, Partition: src.Partition, WaitIndex: index,
	}).WithContext(ctx)
	var (
		out consulEntries
		qm  *consulapi.QueryMeta
		err error
	)
	if src.Kind == onchange.ConsulKey {
		var pair *consulapi.KVPair
		pair, qm, err = kv.Get(src.Path, q)
		if pair != nil {
			out = append(out, pair.ModifyIndex)
		}
	} else {
		var pairs consulapi.KVPairs
		pairs, qm, err = kv.List(src.Path, q)
		for _, p := range pairs {
			out = append(out, p.ModifyIndex)
		}
	}
	if err != nil || qm == nil {
		return nil, 0, err
	}
	return out, qm.LastIndex, nil
}

// consulFailed logs and publishes a failure of a Consul source.
func (h *Hub) consulFailed(g *group, err error) {
	h.opts.Logger.Warn("cannot watch Consul", "source", g.key.source.String(), "err", err)
	h.publishErr(g, err)
}

// consulAnswer applies an answer to the source. Consul keeps no modify time, so ChangedAt
// is when this hub first saw the answer's Index (or Count) change, zero at the first
// answer (a failure seen before any answer does not count as one).
func consulAnswer(entries consulEntries, now time.Time) answerFunc {
	return func(_ onchange.Source, prev State, known bool) State {
		st := State{Count: len(entries)}
		for _, i := range entries {
			st.Index = max(st.Index, i)
		}
		switch {
		case !known || prev.Err != nil && prev.Index == 0 && prev.Count == 0:
			// the first answer: Consul says nothing of when it was written
		case st.Index != prev.Index || st.Count != prev.Count:
			st.ChangedAt = now
		default:
			st.ChangedAt = prev.ChangedAt
		}
		return st
	}
}
