package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// DefaultFleetConcurrency bounds the fleets one agent drives at once. A fleet's driver is
// light (it files its jobs' restarts and follows their records; the agent's drives of those
// restarts do the work), but each holds a lease, a watch of its steering and a watch per
// running child; fleets beyond the bound wait for a free slot or for another agent.
const DefaultFleetConcurrency = 8

// fleetRunner drives the fleets filed with `run -jobs ... -detach` and those whose driver
// died or let go, as dispatchDrives does for restarts. Each fleet is driven by
// fleetrun.Driver without driving its children: a child is an ordinary detached restart,
// which the agent's discovery finds (its record is created under the prefix the agent
// watches) and drives like any other. Several agents share fleets through each fleet's
// lease: Run fails at once with store.ErrLeaseHeld when another driver holds it, and
// whichever agent tries first once it is released or expires takes the fleet up.
//
// Fleets are found by listing them (Fleets.List) after each change of the fleets' records,
// watched with one blocking list query (Fleets.WatchList), at most once per MinListGap.
type fleetRunner struct {
	a       *Agent
	fleets  store.Fleets
	driver  *fleetrun.Driver
	limit   int
	log     *slog.Logger
	metrics *fleetMetrics

	mu      sync.Mutex
	known   map[string]*fleetEntry
	listed  []*fleet.Record // the latest listing, newest first (the page's and the gauges')
	listErr error           // why the latest listing failed (nil: it did not)
	kick    chan struct{}
	wg      sync.WaitGroup
}

// fleetEntry is what the runner remembers of one fleet between dispatches.
type fleetEntry struct {
	driving bool
	// endedAt is the ModifyIndex at which a drive returned the fleet ended (0: never).
	endedAt uint64
	// retryAt is when a fleet held elsewhere, or whose drive failed, is tried again.
	retryAt  time.Time
	failures int
	// waiting says the fleet was logged as waiting for a free slot (logged once).
	waiting bool
}

func fleetKey(ns, id string) string { return ns + "\x00" + id }

// newFleetRunner returns the runner of cfg.Fleets, or nil when the agent has no fleet
// store: fleets live in Nomad Variables only.
func newFleetRunner(a *Agent) *fleetRunner {
	if a.cfg.Fleets == nil {
		return nil
	}
	r := &fleetRunner{a: a, fleets: a.cfg.Fleets, driver: a.cfg.FleetDriver, limit: a.cfg.FleetConcurrency,
		log: a.log.With("component", "fleets"), metrics: a.metrics.fleetMetrics(), known: map[string]*fleetEntry{},
		kick: make(chan struct{}, 1)}
	return r
}

// startFleetRunner runs the fleet runner until ctx ends; Run's wait covers it and the
// drives it started, which detach from their fleets (each left as stored, its lease
// released so that another agent takes it up at once).
func (a *Agent) startFleetRunner(ctx context.Context) {
	if a.fleets == nil {
		a.log.Info("fleets are off: they need the Nomad store (-state nomad)")
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.fleets.run(ctx)
	}()
}

func (r *fleetRunner) run(ctx context.Context) {
	defer r.wg.Wait() // the drives, which detach from their fleets
	runLoop(ctx, r.watchChanges, r.kick, r.relist, r.dispatch)
}

// watchChanges signals changed after each change of the fleets, at most once per
// MinListGap, and once per Resync whatever happened (a safety net under the watch).
func (r *fleetRunner) watchChanges(ctx context.Context, changed chan<- struct{}) {
	lastResync := time.Now()
	w := &cluster.Watch{What: "watching the fleets", Log: r.log.With("namespace", r.a.cfg.Namespace),
		Policy: watchRetryPolicy(), MinGap: r.a.cfg.MinListGap}
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		next, err := r.fleets.WatchList(ctx, r.a.cfg.Namespace, index, r.a.cfg.ListWait)
		if err != nil {
			return 0, err
		}
		// The first answer (index 0: the first, or after a reset) is always a change.
		resync := time.Since(lastResync) >= r.a.cfg.Resync
		if next != index || index == 0 || resync {
			if resync {
				lastResync = time.Now()
			}
			signal(changed)
		}
		return next, nil
	})
}

// relist reads every fleet the agent can see; the active ones are what dispatch drives.
func (r *fleetRunner) relist(ctx context.Context) {
	recs, err := r.fleets.List(ctx, r.a.cfg.Namespace, false)
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	r.listErr = err
	if err == nil {
		r.listed = recs
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Warn("listing the fleets failed; retrying at the next change", "namespace", r.a.cfg.Namespace, "err", err)
		r.metrics.listErrors.Inc()
		return
	}
	r.metrics.setListing(recs)
	r.a.page.changed() // the page shows fleets beside restarts
}

// dispatch starts a drive for each active fleet of the latest listing that is due, within
// the bound, and returns how long until the earliest retry is due.
func (r *fleetRunner) dispatch(ctx context.Context) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	wake := time.Hour
	inFlight := r.drivingCount()
	seen := make(map[string]bool, len(r.listed))
	for _, rec := range r.listed {
		k := fleetKey(rec.Namespace, rec.ID)
		seen[k] = true
		e := r.known[k]
		if e == nil {
			e = &fleetEntry{}
			r.known[k] = e
		}
		switch {
		case rec.Status.Terminal(), e.driving, e.endedAt >= rec.ModifyIndex && e.endedAt != 0:
			continue
		case now.Before(e.retryAt):
			wake = min(wake, e.retryAt.Sub(now))
			continue
		case inFlight >= r.limit:
			if !e.waiting {
				e.waiting = true
				r.log.Info("fleet waits for a free slot: this agent drives as many fleets as it may", "fleet", rec.ID, "namespace", rec.Namespace, "limit", r.limit)
			}
			continue // a drive's end kicks the dispatch again
		}
		inFlight++
		e.driving, e.waiting = true, false
		r.wg.Go(func() { r.drive(ctx, rec.Namespace, rec.ID) })
	}
	r.metrics.driving.Set(float64(inFlight))
	for k, e := range r.known {
		if !seen[k] && !e.driving {
			delete(r.known, k) // deleted (retention), or no longer visible
		}
	}
	return wake
}

// drivingCount counts the drives in progress; callers hold mu.
func (r *fleetRunner) drivingCount() int {
	return countWhere(r.known, func(e *fleetEntry) bool { return e.driving })
}

// drive drives one fleet with fleetrun until it ends, ctx ends or its lease is lost, and
// records the outcome for dispatch.
func (r *fleetRunner) drive(ctx context.Context, ns, id string) {
	log := r.log.With("fleet", id, "namespace", ns)
	rec, err := r.driver.Run(ctx, ns, id, nil)
	r.mu.Lock()
	e := r.known[fleetKey(ns, id)]
	if e == nil {
		e = &fleetEntry{}
		r.known[fleetKey(ns, id)] = e
	}
	e.driving = false
	r.metrics.driving.Set(float64(r.drivingCount()))
	r.settle(e, rec, err, ctx.Err() != nil, log)
	r.mu.Unlock()
	r.kickDispatch()
}

// settle records how a drive ended in e; callers hold mu.
func (r *fleetRunner) settle(e *fleetEntry, rec *fleet.Record, err error, stopping bool, log *slog.Logger) {
	now := time.Now()
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		// Another driver has it; its lease is tried again at the retry pace, so that a
		// driver that died (its lease expired) is succeeded.
		e.failures = 0
		e.retryAt = now.Add(r.a.cfg.RetryFailed)
		log.Debug("fleet is driven elsewhere")
	case stopping:
		log.Info("detached from the fleet")
	case errors.Is(err, store.ErrFleetNotFound):
		e.retryAt = now.Add(r.a.cfg.RetryFailed) // deleted: forgotten once no longer listed
	case err != nil:
		e.failures++
		delay := r.a.cfg.RetryFailed << min(e.failures-1, 4)
		e.retryAt = now.Add(delay)
		r.metrics.driveErrors.Inc()
		log.Warn("driving the fleet failed; will try again", "retry_in", delay, "err", err)
	case rec != nil && rec.Status.Terminal():
		e.failures = 0
		e.endedAt = max(rec.ModifyIndex, 1)
		log.Info("fleet finished", "status", rec.Status, "reason", rec.Reason)
	default:
		e.retryAt = now.Add(r.a.cfg.RetryFailed)
	}
}

// kickDispatch has the loop dispatch again soon (a drive ended).
func (r *fleetRunner) kickDispatch() { signal(r.kick) }

// snapshot returns the latest listing of the fleets (newest first) and why the latest
// listing failed, if it did.
func (r *fleetRunner) snapshot() ([]*fleet.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listed, r.listErr
}
