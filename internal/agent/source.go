package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/store"
)

// candidate is a restart the agent might drive, as a discovery pass saw it.
type candidate struct {
	ns, id string
	// headIndex is the record's ModifyIndex as listed; leaseIndex the lease variable's
	// (0 when it has none). A change of either is a reason to look again.
	headIndex, leaseIndex uint64
}

func (c candidate) key() string { return c.ns + "\x00" + c.id }

// pass is one discovery pass's view of the restarts.
type pass struct {
	cands []candidate
	// resync says the pass is the periodic safety net: every restart not known terminal is
	// looked at again, even one whose lease was held at the last look.
	resync bool
}

// source finds restarts. run sends passes on out until ctx ends.
type source interface {
	run(ctx context.Context, out chan<- pass)
	// retryHeldEachPass says a restart whose lease was held is tried again at every pass
	// (the local store's passes are cheap and it has no lease index to watch).
	retryHeldEachPass() bool
}

// nomadSource watches the store's variables with one blocking list query across the
// namespaces: it wakes when any record or lease changes (created, updated, lock released or
// expired), never on a fixed interval.
type nomadSource struct {
	client    *api.Client
	prefix    string
	namespace string
	wait      time.Duration // each blocking query's wait
	minGap    time.Duration // least time between passes, so a busy cluster is listed at a bounded rate
	resync    time.Duration
	log       *slog.Logger
	metrics   *Metrics
}

func (s *nomadSource) retryHeldEachPass() bool { return false }

func (s *nomadSource) run(ctx context.Context, out chan<- pass) {
	var index uint64
	listed := false
	lastResync := time.Now()
	failures := 0
	for ctx.Err() == nil {
		q := (&api.QueryOptions{Namespace: s.namespace, WaitIndex: index, WaitTime: s.wait}).WithContext(ctx)
		metas, qm, err := s.client.Variables().PrefixList(s.prefix+"/", q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			delay := min(time.Duration(failures)*time.Second, 30*time.Second)
			s.log.Warn("listing restart records failed; retrying", "prefix", s.prefix, "namespace", s.namespace, "retry_in", delay, "err", err)
			if !sleep(ctx, delay) {
				return
			}
			index = 0 // the index may belong to a leader that is gone
			continue
		}
		failures = 0
		s.metrics.discoveryPass.Inc()
		p := pass{cands: s.candidates(metas)}
		if time.Since(lastResync) >= s.resync {
			p.resync = true
			lastResync = time.Now()
		}
		// The first answer is always a pass (the agent is ready once it has listed), even
		// from an empty table whose index has not moved.
		changed := qm.LastIndex != index || !listed
		listed = true
		if qm.LastIndex < index { // Nomad's rule: an index going backwards resets the watch
			index = 0
		} else {
			index = qm.LastIndex
		}
		if changed || p.resync {
			select {
			case out <- p:
			case <-ctx.Done():
				return
			}
		}
		if !sleep(ctx, s.minGap) {
			return
		}
	}
}

// candidates turns a listing into restarts: heads are <prefix>/<job>/<id>, leases
// <prefix>/<job>/<id>/lease; chunks and the per-job active marker are ignored.
func (s *nomadSource) candidates(metas []*api.VariableMetadata) []candidate {
	byKey := map[string]*candidate{}
	var order []string
	get := func(ns, id string) *candidate {
		k := ns + "\x00" + id
		c := byKey[k]
		if c == nil {
			c = &candidate{ns: ns, id: id}
			byKey[k] = c
			order = append(order, k)
		}
		return c
	}
	for _, m := range metas {
		rest, ok := strings.CutPrefix(m.Path, s.prefix+"/")
		if !ok {
			continue
		}
		parts := strings.Split(rest, "/")
		switch {
		case len(parts) == 2 && isRestartID(parts[1]):
			get(m.Namespace, parts[1]).headIndex = m.ModifyIndex
		case len(parts) == 3 && parts[2] == "lease" && isRestartID(parts[1]):
			get(m.Namespace, parts[1]).leaseIndex = m.ModifyIndex
		}
	}
	out := make([]candidate, 0, len(order))
	for _, k := range order {
		if c := byKey[k]; c.headIndex != 0 { // a lease without its record: nothing to drive
			out = append(out, *c)
		}
	}
	return out
}

func isRestartID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// listSource lists active records through the Store at a fixed pace: the fallback for the
// local store, which offers no watch across records (its listing reads local files).
type listSource struct {
	store     store.Store
	namespace string
	every     time.Duration
	log       *slog.Logger
	metrics   *Metrics
}

func (s *listSource) retryHeldEachPass() bool { return true }

func (s *listSource) run(ctx context.Context, out chan<- pass) {
	for ctx.Err() == nil {
		recs, err := s.store.List(ctx, store.Filter{Namespace: s.namespace, Active: true})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("listing restart records failed; retrying", "store", s.store.Kind(), "err", err)
		} else {
			s.metrics.discoveryPass.Inc()
			p := pass{resync: true}
			for _, r := range recs {
				p.cands = append(p.cands, candidate{ns: r.Namespace, id: r.ID, headIndex: r.ModifyIndex})
			}
			select {
			case out <- p:
			case <-ctx.Done():
				return
			}
		}
		if !sleep(ctx, s.every) {
			return
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c candidate) String() string { return fmt.Sprintf("%s/%s", c.ns, c.id) }
