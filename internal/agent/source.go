package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
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

// Discovery lists restart records with blocking queries: nomadstore.Lister.
type Discovery interface {
	// List lists the restarts in namespace ns ("*": every namespace) once the records'
	// index passes after, or when wait has passed; after 0 answers at once.
	List(ctx context.Context, ns string, after uint64, wait time.Duration) (store.RestartListing, error)
	// Prefix is the root of the variables listed, for logs.
	Prefix() string
}

// nomadSource watches the store's variables with one blocking list query across the
// namespaces (Config.Discovery: nomadstore.Lister): it wakes when any record or lease changes
// (created, updated, lock released or expired), never on a fixed interval.
type nomadSource struct {
	sourceReports
	lister Discovery
	wait   time.Duration // each blocking query's wait
	minGap time.Duration // least time between the starts of two listings, so a busy cluster is listed at a bounded rate
	resync time.Duration
}

// sourceReports are what both sources share: the namespace they list and where they report
// (the log, the metrics, and the listing's outcome, which the page warns of while listings
// fail).
type sourceReports struct {
	namespace string
	log       *slog.Logger
	metrics   *Metrics
	listed    func(error)
}

func (s *nomadSource) retryHeldEachPass() bool { return false }

func (s *nomadSource) run(ctx context.Context, out chan<- pass) {
	listed := false
	lastResync := time.Now()
	w := &cluster.Watch{What: "listing restart records", Log: s.log.With("prefix", s.lister.Prefix(), "namespace", s.namespace),
		Policy: watchRetryPolicy(), MinGap: s.minGap}
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		listing, err := s.lister.List(ctx, s.namespace, index, s.wait)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		s.listed(err)
		if err != nil {
			return 0, err
		}
		s.metrics.discoveryPass.Inc()
		p := pass{cands: candidates(listing.Restarts)}
		if time.Since(lastResync) >= s.resync {
			p.resync = true
			lastResync = time.Now()
		}
		// The first answer is always a pass (the agent is ready once it has listed), even
		// from an empty table whose index has not moved.
		changed := listing.Index != index || !listed
		listed = true
		if changed || p.resync {
			send(ctx, out, p) // fails only when ctx ends, which ends the watch
		}
		return listing.Index, nil
	})
}

// candidates turns the restarts a listing found into a pass's candidates.
func candidates(listed []store.ListedRestart) []candidate {
	out := make([]candidate, 0, len(listed))
	for _, r := range listed {
		out = append(out, candidate{ns: r.Namespace, id: r.ID, headIndex: r.HeadIndex, leaseIndex: r.LeaseIndex})
	}
	return out
}

// listSource lists active records through the Store at a fixed pace: the fallback for the
// local store, which offers no watch across records (its listing reads local files).
type listSource struct {
	sourceReports
	store store.Store
	every time.Duration
}

func (s *listSource) retryHeldEachPass() bool { return true }

func (s *listSource) run(ctx context.Context, out chan<- pass) {
	for ctx.Err() == nil {
		recs, err := s.store.List(ctx, store.Filter{Namespace: s.namespace, Active: true})
		if ctx.Err() == nil {
			s.listed(err)
		}
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
			if !send(ctx, out, p) {
				return
			}
		}
		if !cluster.Sleep(ctx, s.every) {
			return
		}
	}
}

// watchRetryPolicy paces a watch loop after failed listings: from about a second up to
// half a minute between tries, and never gives up (the agent keeps watching until it stops).
func watchRetryPolicy() cluster.RetryPolicy {
	return cluster.RetryPolicy{Initial: time.Second, Max: 30 * time.Second}
}

// send hands p to the loop reading out; it reports false when ctx ended first.
func send[T any](ctx context.Context, out chan<- T, p T) bool {
	select {
	case out <- p:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c candidate) String() string { return fmt.Sprintf("%s/%s", c.ns, c.id) }
