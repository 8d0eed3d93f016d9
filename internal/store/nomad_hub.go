package store

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// A shared watch (NomadOptions.SharedWatch) lets every concurrent Watch and WatchHead of one
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

func (s *hubSet) get(n *Nomad, ns string) *watchHub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byNS == nil {
		s.byNS = map[string]*watchHub{}
	}
	h := s.byNS[ns]
	if h == nil {
		h = &watchHub{n: n, ns: ns, waiters: map[*hubWaiter]struct{}{}}
		s.byNS[ns] = h
	}
	return h
}

// watchHub runs one namespace's blocking list while it has waiters.
type watchHub struct {
	n  *Nomad
	ns string

	mu      sync.Mutex
	waiters map[*hubWaiter]struct{}
	// heads maps each head variable's path to its ModifyIndex in the last listing; index is
	// where the next blocking query waits from (0 after a failure, for an answer at once);
	// gen counts listings (0: none yet). They outlive the goroutine, so a hub that
	// stops and starts again keeps watching from where it was.
	heads map[string]uint64
	index uint64
	gen   uint64
	// running says the goroutine runs; cancel ends its list query or pause in flight.
	running bool
	cancel  context.CancelFunc
	// lastSent is when the last list query was sent, to pace them across restarts of the
	// goroutine too.
	lastSent time.Time
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
}

// run lists the namespace's heads with blocking queries, paced, until no waiter is left.
func (h *watchHub) run() {
	backoff := hubMinBackoff
	for {
		ctx, index, pause, ok := h.begin()
		if !ok {
			return
		}
		err := sleepCtx(ctx, pause)
		var (
			heads map[string]uint64
			last  uint64
		)
		if err == nil {
			h.markSent()
			heads, last, err = h.list(ctx, index)
		}
		switch {
		case ctx.Err() != nil:
			// Every waiter left; begin decides whether to go on.
		case err != nil && cluster.IsTransient(err):
			h.n.opts.Logger.Debug("shared watch of restart records: retrying", "namespace", h.ns, "retry_in", backoff, "error", err)
			h.resetIndex()
			_ = sleepCtx(ctx, backoff)
			backoff = min(2*backoff, watchMaxBackoff)
		case err != nil:
			h.fail(h.n.storeErr(err))
		default:
			backoff = hubMinBackoff
			h.publish(heads, last)
		}
		h.end()
	}
}

const hubMinBackoff = 50 * time.Millisecond

// begin starts a round of run: it stops the goroutine when no waiter is left, else returns
// the round's context (ended by remove when the last waiter leaves), the index to list
// after, and how long to wait first to keep the pace.
func (h *watchHub) begin() (context.Context, uint64, time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.waiters) == 0 {
		h.running = false
		return nil, 0, 0, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	return ctx, h.index, time.Until(h.lastSent.Add(h.n.opts.SharedWatchGap)), true
}

func (h *watchHub) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancel()
	h.cancel = nil
}

func (h *watchHub) markSent() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastSent = time.Now()
}

func (h *watchHub) resetIndex() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.index = 0 // the index may belong to a leader that is gone
}

// fail wakes every waiter with err, a failure that retrying will not mend (a 403).
func (h *watchHub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		delete(h.waiters, w)
		w.note <- hubNote{gen: h.gen, err: err}
	}
}

// publish takes a listing and wakes the waiters whose heads it shows passed.
func (h *watchHub) publish(heads map[string]uint64, last uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	h.heads = heads
	if last < h.index { // Nomad's rule: an index going backwards resets the watch
		h.index = 0
	} else {
		h.index = last
	}
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
		if ok && job != "" && !nomadvars.Reserved(job) && !strings.Contains(id, "/") && validID(id) && id != "active" {
			heads[m.Path] = m.ModifyIndex
		}
	}
	return heads, last, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
