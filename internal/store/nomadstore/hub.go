package nomadstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// A shared watch (Options.SharedWatch) lets every concurrent Watch and WatchHead of one
// handle share one blocking list query per namespace on the store's prefix, instead of one
// blocking read each. Nomad caps each client address's concurrent HTTP connections
// (limits.http_max_conns_per_client, 100 by default) and a blocking query holds one for its
// whole wait, so an agent driving hundreds of restarts cannot hold one per record.
//
// The list answers metadata only (path and ModifyIndex of each variable). Each answer tells
// which heads passed their waiter's afterIndex; only those waiters are woken, and each reads
// its own head with a plain, non-blocking read.
//
// Why no change is missed: a waiter registers first and is then judged against the last
// listing the hub holds, if any. A change made before that listing was taken shows in it; a
// change made after has a greater index than the listing's, so it ends the blocking query
// the hub has in flight (or is about to send) at that index, and the answer that shows it is
// judged after the waiter registered.

// DefaultSharedWatchGap is the least time between two list queries of a shared watch: a
// busy cluster changes variables many times a second and each change ends the blocking
// query, so the pace bounds the listing's cost.
const DefaultSharedWatchGap = 250 * time.Millisecond

// sharedWatchWait is each blocking list query's wait, as a blocking read's (readHead).
const sharedWatchWait = 5 * time.Minute

// hubSet holds a handle's watch hubs, one per namespace; its zero value is ready.
type hubSet struct {
	mu   sync.Mutex
	byNS map[string]*watchHub
}

func (s *hubSet) get(n *Restarts, ns string) *watchHub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byNS == nil {
		s.byNS = map[string]*watchHub{}
	}
	h := s.byNS[ns]
	if h == nil {
		h = &watchHub{n: n, ns: ns, waiters: map[*hubWaiter]struct{}{}, watch: cluster.Watch{
			What: "listing restart records for the shared watch", Log: n.opts.Logger.With("namespace", ns),
			Policy: cluster.RetryPolicy{Initial: hubMinBackoff, Max: watchMaxBackoff}, MinGap: n.opts.SharedWatchGap,
		}}
		s.byNS[ns] = h
	}
	return h
}

// watchHub runs one namespace's blocking list while it has waiters.
type watchHub struct {
	n  *Restarts
	ns string

	// watch runs the list queries: their index, pace, backoff and failure streak. Only the
	// hub's goroutine uses it; it outlives the goroutine, so a hub that stops and starts
	// again keeps watching from where it was, at the same pace.
	watch cluster.Watch

	mu      sync.Mutex
	waiters map[*hubWaiter]struct{}
	// heads maps each head variable's path to its ModifyIndex in the last listing; gen
	// counts listings (0: none yet).
	heads map[string]uint64
	gen   uint64
	// running says the goroutine runs; cancel ends its watch, called once no waiter is left.
	running bool
	cancel  context.CancelFunc
}

// hubWaiter is one Watch or WatchHead waiting for its head to pass after.
type hubWaiter struct {
	path  string
	after uint64
	// minGen: only listings of this generation or later may wake the waiter, so one that
	// read its head and found nothing new is not woken again by the same listing.
	minGen uint64
	note   chan hubNote // buffered: the hub never blocks on a waiter
}

// hubNote wakes a waiter: its head passed after in listing gen, or is absent from it (a
// listing older than the head's creation, or the head was deleted: the waiter's read
// tells), or the listing failed for good (err).
type hubNote struct {
	gen     uint64
	present bool
	index   uint64 // the variable's ModifyIndex in the listing, when present
	err     error
}

// add registers w, judges it at once against the last listing, and starts the hub's
// goroutine when it is not running.
func (h *watchHub) add(w *hubWaiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiters[w] = struct{}{}
	if h.gen > 0 && h.gen >= w.minGen {
		h.judgeLocked(w)
	}
	if !h.running && len(h.waiters) > 0 {
		h.running = true
		go h.run()
	}
}

// wait registers w and returns the note that wakes it, or ctx's error.
func (h *watchHub) wait(ctx context.Context, w *hubWaiter) (hubNote, error) {
	h.add(w)
	select {
	case <-ctx.Done():
		h.remove(w)
		return hubNote{}, ctx.Err()
	case note := <-w.note:
		return note, nil
	}
}

// remove unregisters w (its ctx ended); the last waiter leaving ends the list in flight.
func (h *watchHub) remove(w *hubWaiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters, w)
	h.idleLocked()
}

// idleLocked ends the watch in flight once no waiter is left: a blocking query holds a
// connection for its whole wait.
func (h *watchHub) idleLocked() {
	if len(h.waiters) == 0 && h.cancel != nil {
		h.cancel()
	}
}

// judgeLocked wakes w (and unregisters it) if the last listing shows its head passed
// w.after, or lacks it.
func (h *watchHub) judgeLocked(w *hubWaiter) {
	idx, ok := h.heads[w.path]
	if ok && idx <= w.after {
		return
	}
	delete(h.waiters, w)
	w.note <- hubNote{gen: h.gen, present: ok, index: idx}
	h.idleLocked()
}

// run lists the namespace's heads with blocking queries (h.watch: paced, backing off
// after failures) while it has waiters.
func (h *watchHub) run() {
	for {
		ctx, ok := h.begin()
		if !ok {
			return
		}
		h.watch.Run(ctx, h.query) // returns once no waiter is left (idleLocked)
	}
}

// hubMinBackoff is the shared watch's first backoff after a failed list; watchMaxBackoff
// its longest.
const hubMinBackoff = 50 * time.Millisecond

// begin stops the goroutine when no waiter is left, else returns the context of its next
// watch, which idleLocked ends when the last waiter leaves.
func (h *watchHub) begin() (context.Context, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
		h.cancel = nil
	}
	if len(h.waiters) == 0 {
		h.running = false
		return nil, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	return ctx, true
}

// query is one list query of the watch: it publishes the listing, or wakes every waiter
// with a failure that retrying will not mend (a 403); passing failures (5xx, 429) are
// the watch's to retry.
func (h *watchHub) query(ctx context.Context, index uint64) (uint64, error) {
	heads, last, err := h.list(ctx, index)
	if err != nil {
		if ctx.Err() == nil && !cluster.IsTransient(err) {
			h.fail(h.n.storeErr(err))
		}
		return 0, err
	}
	h.publish(heads)
	return last, nil
}

// fail wakes every waiter with err.
func (h *watchHub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		delete(h.waiters, w)
		w.note <- hubNote{gen: h.gen, err: err}
	}
	h.idleLocked()
}

// publish takes a listing and wakes the waiters whose heads it shows passed.
func (h *watchHub) publish(heads map[string]uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	h.heads = heads
	for w := range h.waiters {
		h.judgeLocked(w)
	}
}

// list runs one blocking list query after index (0: at once) and returns the heads it
// shows, by path, and the listing's index.
func (h *watchHub) list(ctx context.Context, index uint64) (map[string]uint64, uint64, error) {
	metas, last, err := h.n.watching.ListAfter(ctx, h.ns, h.n.opts.Prefix+"/", nomadvars.Wait{After: index, Time: sharedWatchWait})
	if err != nil {
		return nil, 0, err
	}
	heads := make(map[string]uint64, len(metas))
	root := h.n.opts.Prefix + "/"
	for _, m := range metas {
		rest, ok := strings.CutPrefix(m.Path, root)
		if !ok {
			continue
		}
		// A head is <prefix>/<job>/<id>, a control bell <prefix>/<job>/<id>/control;
		// chunks, leases and markers are neither, nor is anything under a reserved
		// directory (a fleet's <prefix>/~fleets/<id>/control is no restart's bell).
		job, id, ok := strings.Cut(rest, "/")
		id = strings.TrimSuffix(id, "/"+bellName)
		if ok && job != "" && !nomadvars.Reserved(job) && !strings.Contains(id, "/") && store.ValidID(id) && id != "active" {
			heads[m.Path] = m.ModifyIndex
		}
	}
	return heads, last, nil
}
