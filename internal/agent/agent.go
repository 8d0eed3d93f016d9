package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// DefaultConcurrency bounds the restarts one agent drives at once.
const DefaultConcurrency = 500

// Config wires an Agent.
//
// The command builds the parts once (the cluster, the stores, the engine and the fleet
// driver on one Nomad client) and gives them here; the agent builds none of its own.
type Config struct {
	Cluster cluster.Cluster
	Store   store.Store
	// Engine drives the restarts of Store on Cluster.
	Engine *engine.Engine
	// Discovery lists the restarts of Store with blocking queries, so that the agent finds
	// work as soon as a record or lease changes (the Nomad store's listing). Nil (the local
	// store): the agent lists Store every PollEvery.
	Discovery Discovery
	// Jobs lists the cluster's jobs: followed with blocking queries for config-change
	// rollouts, selected by filter for scheduled fleets. Nil: neither.
	Jobs cluster.JobLister
	// Schedules keeps scheduled restarts and fleets; nil: scheduled restarts are off (a
	// local store keeps none).
	Schedules *schedule.Store
	// Address is the Nomad address the agent talks to, recorded in the fleets it files.
	Address string
	// Namespace limits the agent to one namespace; "" or "*" is every namespace its token
	// may list.
	Namespace string
	// Concurrency bounds the restarts driven at once; default DefaultConcurrency.
	Concurrency int
	// Holder names this agent in records and leases; default "agent@<host>:<pid>".
	Holder  string
	Logger  *slog.Logger
	Metrics *Metrics // nil: NewMetrics()
	// Resync is how often every restart not known to be finished is looked at again, even
	// one whose lease looked held (a safety net under the watch); default 5m.
	Resync time.Duration
	// MinListGap is the least time between two listings of the records (a busy cluster
	// changes them many times a second); default 1s.
	MinListGap time.Duration
	// ListWait is each blocking list query's wait; default cluster.DefaultWatchWait.
	ListWait time.Duration
	// PollEvery is the local store's listing interval; default 2s.
	PollEvery time.Duration
	// RetryFailed is the first delay before driving again a restart whose drive failed (it
	// doubles up to 16 times that); default 5s.
	RetryFailed time.Duration
	// ViewMaxAge is how stale the records shown by the web page and the status gauges may
	// be; default 2s.
	ViewMaxAge time.Duration
	// Now is the local clock for records and waits; nil: time.Now.
	Now func() time.Time
	// Changes turns on config-change rollouts (change_runner.go); nil: off. It needs Jobs.
	Changes *ChangeRollouts
	// Actions builds, for one action of the web page, what performs it with the Nomad ACL
	// token the browser sent ("" when none: Nomad's anonymous token): the steering of
	// restarts and fleets, and the filing of new restarts. Nil: the page steers and files
	// nothing.
	Actions func(token string) (page.Actions, error)
	// Fleets is the store of fleet restarts the agent drives (fleet_runner.go) and
	// FleetDriver their driver, which leaves the fleets' children to the agent (they are
	// detached restarts); nil: fleets are off (they live in Nomad Variables only).
	Fleets      store.Fleets
	FleetDriver *fleetrun.Driver
	// FleetConcurrency bounds the fleets driven at once; default DefaultFleetConcurrency.
	FleetConcurrency int
}

// Agent adopts restarts whose lease is free and drives each to its end.
type Agent struct {
	cfg     Config
	eng     *engine.Engine
	src     source
	log     *slog.Logger
	metrics *Metrics

	mu      sync.Mutex
	known   map[string]*entry
	last    pass
	running bool // Run is active and has listed once
	stopped bool
	wg      sync.WaitGroup
	kick    chan struct{}

	view   viewCache
	page   pageHub      // wakes the web page's live streams
	fleets *fleetRunner // nil: fleets are off
}

// entry is what the agent remembers of one restart between passes.
type entry struct {
	driving bool
	// terminalAt is the head index at which the record was seen finished (0: not seen).
	terminalAt uint64
	// held says the lease was held elsewhere at the last try, with the lease index then.
	held       bool
	heldLease  uint64
	retryAt    time.Time
	failures   int
	lastResult string
}

// New returns an Agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.Cluster == nil || cfg.Store == nil || cfg.Engine == nil {
		return nil, errors.New("agent: Cluster, Store and Engine are required")
	}
	if (cfg.Fleets == nil) != (cfg.FleetDriver == nil) {
		return nil, errors.New("agent: Fleets and FleetDriver go together")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "*"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.FleetConcurrency <= 0 {
		cfg.FleetConcurrency = DefaultFleetConcurrency
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("agent@%s:%d", host, os.Getpid())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.MinListGap <= 0 {
		cfg.MinListGap = time.Second
	}
	if cfg.ListWait <= 0 {
		cfg.ListWait = cluster.DefaultWatchWait
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 2 * time.Second
	}
	if cfg.RetryFailed <= 0 {
		cfg.RetryFailed = 5 * time.Second
	}
	if cfg.ViewMaxAge <= 0 {
		cfg.ViewMaxAge = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("agent", cfg.Holder), metrics: cfg.Metrics,
		known: map[string]*entry{}, kick: make(chan struct{}, 1)}
	a.eng = cfg.Engine
	reports := sourceReports{namespace: cfg.Namespace, log: a.log, metrics: a.metrics, listed: a.listingOutcome}
	if cfg.Discovery != nil {
		a.src = &nomadSource{sourceReports: reports, lister: cfg.Discovery, wait: cfg.ListWait, minGap: cfg.MinListGap, resync: cfg.Resync}
	} else {
		a.src = &listSource{sourceReports: reports, store: cfg.Store, every: cfg.PollEvery}
	}
	a.view = viewCache{a: a}
	a.fleets = newFleetRunner(a)
	return a, nil
}

// listingOutcome hears how each listing of the records went: while they fail (Nomad
// unreachable, a denial), the page warns that what it shows may be out of date.
func (a *Agent) listingOutcome(err error) { a.page.listing(a.cfg.Now(), err) }

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Holder is the name the agent drives restarts under.
func (a *Agent) Holder() string { return a.cfg.Holder }

// Run finds and drives restarts until ctx ends. Then every drive detaches at its next step
// (the record stays consistent, each lease is released so another agent takes over at once)
// and Run returns nil once all have. Run may be called once.
func (a *Agent) Run(ctx context.Context) error {
	passes := make(chan pass)
	srcCtx, stopSrc := context.WithCancel(ctx)
	defer stopSrc()
	go a.src.run(srcCtx, passes)
	a.startScheduleRunner(ctx) // scheduled restarts (schedule_runner.go); Run's wait covers it
	a.startChangeRunner(ctx)   // config-change rollouts (change_runner.go), when configured
	a.startFleetRunner(ctx)    // fleet restarts (fleet_runner.go), with the Nomad store
	a.log.Info("agent started", "namespace", a.cfg.Namespace, "store", a.cfg.Store.Kind(), "concurrency", a.cfg.Concurrency)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			a.mu.Lock()
			a.stopped = true
			n := a.drivingCount()
			a.mu.Unlock()
			a.page.stop()
			a.log.Info("agent stopping: detaching from the restarts it drives", "driving", n)
			a.wg.Wait()
			a.log.Info("agent stopped")
			return nil
		case p := <-passes:
			a.mu.Lock()
			fresh := a.hasNew(p)
			a.last = p
			a.running = true
			a.mu.Unlock()
			a.page.changed()
			if fresh {
				a.prime(ctx)
			}
		case <-a.kick:
		case <-timer.C:
		}
		next := a.dispatchDrives(ctx)
		timer.Reset(next)
	}
}

// hasNew reports whether p lists restarts the agent has not seen; callers hold mu.
func (a *Agent) hasNew(p pass) bool {
	for _, c := range p.cands {
		if _, ok := a.known[c.key()]; !ok {
			return true
		}
	}
	return false
}

// prime makes the Nomad store learn where every listed restart lives with one listing, so
// that the drives about to start do not each list every record to find their own (the
// store lists to locate a restart it has not seen). A prefix no ID can have matches
// nothing; only the side effect is wanted.
func (a *Agent) prime(ctx context.Context) {
	if a.cfg.Discovery == nil {
		return
	}
	_, err := a.cfg.Store.Find(ctx, a.cfg.Namespace, "-")
	if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
		a.log.Debug("priming the store's index of restarts", "err", err)
	}
}

// drivingCount counts drives in progress; callers hold mu.
func (a *Agent) drivingCount() int {
	return countWhere(a.known, func(e *entry) bool { return e.driving })
}

// dispatchDrives starts drives for the restarts of the last pass that are due, within the
// bound (Concurrency), and returns how long until the earliest retry is due. (Scheduled
// restarts, `run -at` and `run -every`, are the scheduleRunner's: schedule_runner.go.)
func (a *Agent) dispatchDrives(ctx context.Context) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	wake := time.Hour
	p := a.last
	a.last.resync = false // a resync clears held marks once
	inFlight := a.drivingCount()
	seen := make(map[string]bool, len(p.cands))
	for _, c := range p.cands {
		k := c.key()
		seen[k] = true
		e := a.known[k]
		if e == nil {
			e = &entry{}
			a.known[k] = e
		}
		if e.driving || (e.terminalAt != 0 && e.terminalAt >= c.headIndex) {
			continue
		}
		if e.held && !p.resync && !a.src.retryHeldEachPass() && c.leaseIndex == e.heldLease {
			continue // the lease has not changed since it was found held
		}
		if now.Before(e.retryAt) {
			wake = min(wake, e.retryAt.Sub(now))
			continue
		}
		if inFlight >= a.cfg.Concurrency {
			continue // a drive's end kicks the dispatch again
		}
		inFlight++
		e.driving = true
		e.held = false
		a.metrics.driving.Set(float64(inFlight))
		a.wg.Add(1)
		go a.drive(ctx, c)
	}
	// Forget restarts no longer listed (deleted), unless a drive still runs.
	for k, e := range a.known {
		if !seen[k] && !e.driving {
			delete(a.known, k)
		}
	}
	return wake
}

// drive runs one restart through the engine and records the outcome for dispatchDrives.
func (a *Agent) drive(ctx context.Context, c candidate) {
	defer a.wg.Done()
	obs := &driveObserver{m: a.metrics}
	log := a.log.With("restart", c.id, "namespace", c.ns)
	rec, err := a.eng.Drive(ctx, c.ns, c.id, obs.sink)

	a.mu.Lock()
	e := a.known[c.key()]
	if e == nil {
		e = &entry{}
		a.known[c.key()] = e
	}
	e.driving = false
	a.metrics.driving.Set(float64(a.drivingCount()))
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		e.held, e.heldLease = true, c.leaseIndex
		e.lastResult = "held elsewhere"
		e.failures = 0
		a.metrics.lease("held_elsewhere")
		log.Debug("restart is driven elsewhere")
	case ctx.Err() != nil:
		e.lastResult = "detached"
		if obs.acquired {
			a.metrics.lease("released")
		}
		log.Info("detached from restart")
	case errors.Is(err, engine.ErrLeaseLost):
		e.lastResult = "lease lost"
		a.metrics.lease("lost")
		e.retryAt = time.Now().Add(a.cfg.RetryFailed)
		log.Warn("lease lost; another agent may drive the restart", "err", err)
	case errors.Is(err, store.ErrNotFound):
		e.terminalAt = c.headIndex // deleted: nothing to do unless it comes back with a new head
		e.lastResult = "not found"
	case err != nil:
		e.failures++
		delay := a.cfg.RetryFailed << min(e.failures-1, 4)
		e.retryAt = time.Now().Add(delay)
		e.lastResult = "error: " + err.Error()
		a.metrics.driveFailures.Inc()
		if obs.acquired {
			a.metrics.lease("released")
		}
		log.Warn("driving the restart failed; will try again", "retry_in", delay, "err", err)
	default:
		e.failures = 0
		if rec != nil && rec.Status.Terminal() {
			e.terminalAt = max(rec.ModifyIndex, c.headIndex)
			e.lastResult = string(rec.Status)
			if obs.acquired {
				log.Info("restart finished", "status", rec.Status, "reason", rec.Reason)
			}
		} else {
			e.retryAt = time.Now().Add(a.cfg.RetryFailed)
			e.lastResult = "ended"
		}
		if obs.acquired {
			a.metrics.lease("released")
		}
	}
	a.mu.Unlock()
	a.kickDispatch()
}

// offerFiled makes a restart this agent just filed (a config-change rollout) a candidate
// of its dispatch at once, ahead of the next listing, which finds it only after its pace.
func (a *Agent) offerFiled(ns, id string, headIndex uint64) {
	c := candidate{ns: ns, id: id, headIndex: headIndex}
	a.mu.Lock()
	if !slices.ContainsFunc(a.last.cands, func(x candidate) bool { return x.key() == c.key() }) {
		// A copy: the pass's slice is the source's.
		a.last.cands = append(slices.Clip(a.last.cands), c)
	}
	a.mu.Unlock()
	a.kickDispatch()
}

// kickDispatch has Run dispatch drives again soon (a drive ended, a restart was offered).
func (a *Agent) kickDispatch() { signal(a.kick) }

// Ready reports whether the agent has listed the restarts at least once and is not stopping.
func (a *Agent) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running && !a.stopped
}

// Driving returns the IDs of the restarts this agent drives now.
func (a *Agent) Driving() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for k, e := range a.known {
		if e.driving {
			_, id, _ := strings.Cut(k, "\x00")
			out = append(out, id)
		}
	}
	return out
}
