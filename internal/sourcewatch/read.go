package sourcewatch

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// defaultReadRetry bounds the retries of Read's Consul reads: a one-shot look must not wait
// the minute a watch would for a Consul that is down or misaddressed. (Nomad's listings
// keep nomadvars' bound: Nomad answered the caller just before, to say what to read.)
func defaultReadRetry() cluster.RetryPolicy {
	return cluster.RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, MaxElapsed: 2 * time.Second}
}

// Read returns the current State of each of sources, read once with the queries Watch
// runs: one listing per Nomad group for all its sources, one read per Consul source. A
// State is what a watch's first answer gives: a Nomad source's newest ModifyIndex and
// ModifyTime, a Consul source's newest ModifyIndex with a zero ChangedAt (Consul keeps no
// time); Err says why a source cannot be read, worded as Watch words it. Each request is
// retried on transient failures, and a Consul datacenter that still did not answer is not
// asked again for the sources after: each would wait as long for the same failure.
func (h *Hub) Read(ctx context.Context, sources []onchange.Source) map[onchange.Source]State {
	out := make(map[onchange.Source]State, len(sources))
	answers := map[groupKey]answerFunc{}
	unreachable := map[string]error{} // by Consul datacenter
	for _, src := range sources {
		key := keyOf(src)
		answer, ok := answers[key]
		if !ok {
			answer = h.readGroup(ctx, key, unreachable)
			answers[key] = answer
		}
		out[src] = answer(src, State{}, false)
	}
	return out
}

// readGroup reads a group once and returns its answer.
func (h *Hub) readGroup(ctx context.Context, key groupKey, unreachable map[string]error) answerFunc {
	if !key.consul {
		if h.vars == nil {
			return failedAnswer(errNoNomad)
		}
		metas, err := h.vars.InRegion(key.region).List(ctx, key.namespace, key.prefix)
		if err != nil {
			return failedAnswer(err)
		}
		return h.nomadAnswer(newListing(metas), time.Now())
	}
	dc := key.source.Datacenter
	if err := unreachable[dc]; err != nil {
		return failedAnswer(err)
	}
	entries, err := h.readConsulOnce(ctx, key.source)
	if err != nil {
		if cluster.IsTransient(err) {
			unreachable[dc] = err
		}
		return failedAnswer(err)
	}
	return consulAnswer(entries, time.Now())
}

// readConsulOnce reads a Consul source, retried within h.readRetry.
func (h *Hub) readConsulOnce(ctx context.Context, src onchange.Source) (consulEntries, error) {
	if err := checkConsulKind(src); err != nil {
		return nil, err
	}
	kv, err := h.consulKV(src.Datacenter)
	if err != nil {
		return nil, err
	}
	return cluster.Retry(ctx, h.readRetry, h.opts.Logger, "reading Consul keys under "+src.Path,
		func(ctx context.Context) (consulEntries, error) {
			entries, _, err := readConsul(ctx, kv, src, 0)
			return entries, err
		})
}
