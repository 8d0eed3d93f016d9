package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// A fleet ordered in waves starts a job only on its upstreams' evidence: the upstream's
// allocations healthy by the very rules of the readiness gate a restart's batches pass
// (fresh check results only, the healthy deadline; not the min-healthy time, which the
// upstream's own restart just waited: judgeUpstreamAlloc), then its gates holding for the
// fleet's -wave-wait. Evidence measures both, with the gate's code, for a job that is not
// being restarted.

// EvidenceProgress is where an upstream's evidence stands.
type EvidenceProgress struct {
	// Healthy of Total allocations passed the readiness gate; Why is the first reason of
	// one that has not (empty once all have).
	Healthy, Total int
	Why            string
	// GatesHeld is how long the gates have held so far of the wave's wait.
	GatesHeld time.Duration
}

// Evidence holds until the job's allocations (those a restart of it with spec would take
// now) are all healthy by the readiness gate's rules, then until its gates (spec.Gates) held
// for wait, measured evenly across it, and its allocations are healthy again at the end of
// wait; progress hears each change. It returns nil once
// both held, an error saying which allocation or gate failed (the deadline is each
// allocation's healthy deadline, from now), or ctx's error.
func (e *Engine) Evidence(ctx context.Context, namespace, jobID string, spec restart.Spec, wait time.Duration, progress func(EvidenceProgress)) error {
	spec.StartedBefore, spec.CreatedBeforeIndex, spec.OnlyAllocs = time.Time{}, 0, nil
	p, err := e.Plan(ctx, Request{Namespace: namespace, Job: jobID, Exact: true, Spec: spec})
	if err != nil {
		return err
	}
	if len(p.Record.Allocs) == 0 {
		return errors.New("it has no running allocation")
	}
	healthy, err := e.allHealthy(ctx, p.Record, progress)
	if err != nil {
		return err
	}
	err = e.holdGates(ctx, p.Record, wait, func(held time.Duration) {
		progress(EvidenceProgress{Healthy: healthy, Total: healthy, GatesHeld: held})
	})
	if err != nil || wait <= 0 {
		return err
	}
	// Healthy at the end of the wait too: an upstream whose allocations fail their checks
	// during it gives no evidence, gates or not.
	_, err = e.allHealthy(ctx, p.Record, progress)
	return err
}

// allHealthy judges every allocation of rec through its readiness gate at once; the first
// that fails ends the others.
func (e *Engine) allHealthy(ctx context.Context, rec *restart.Record, progress func(EvidenceProgress)) (int, error) {
	d := &driver{e: e, ns: rec.Namespace, id: rec.ID, log: e.log, spec: normalizeSpec(rec.Spec), jobNS: rec.Namespace, jobID: rec.JobID, jobType: rec.JobType}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	total := len(rec.Allocs)
	healthy := 0
	why := map[string]string{}
	report := func() {
		first := ""
		for _, a := range rec.Allocs {
			if w := why[a.ID]; w != "" {
				first = "allocation " + short(a.ID) + ": " + w
				break
			}
		}
		progress(EvidenceProgress{Healthy: healthy, Total: total, Why: first})
	}
	var wg sync.WaitGroup
	for _, a := range rec.Allocs {
		wg.Go(func() {
			err := d.judgeUpstreamAlloc(ctx, a.ID, func(reason string) {
				mu.Lock()
				defer mu.Unlock()
				if why[a.ID] != reason {
					why[a.ID] = reason
					report()
				}
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				cancel(fmt.Errorf("allocation %s: %w", short(a.ID), err))
				return
			}
			healthy++
			delete(why, a.ID)
			report()
		})
	}
	wg.Wait()
	if healthy == total {
		return healthy, nil
	}
	return healthy, context.Cause(ctx)
}

// judgeUpstreamAlloc is an allocation's readiness gate as a batch's (passReadiness), for an
// allocation this driver did not restart: its tasks' start is when it took effect (check
// results from before it do not count), and the deadline runs from now. The min-healthy
// time is not waited again: evidence asks whether the allocation is healthy now, and an
// upstream of the fleet has just had each of its allocations pass the whole gate in its
// own restart, so a second wait would only delay its downstream jobs.
func (d *driver) judgeUpstreamAlloc(ctx context.Context, id string, onWait func(string)) error {
	a, index, err := d.e.cluster.WatchAllocation(ctx, id, 0)
	if err != nil {
		return err
	}
	mode := d.spec.Health
	cfg := health.Config{Mode: mode}
	_, deadline := d.spec.HealthTimes(a.Group)
	tasks := runningTasks(a)
	var sources *health.Sources
	if mode == restart.HealthChecks {
		spec, src, err := d.readinessDeps(ctx)
		if err != nil {
			return err
		}
		tasks = health.LongRunning(spec, a.Group, tasks)
		cfg.Checks = health.AllocChecks(spec, a)
		sources = &src
	}
	d.e.observeTimes(a)
	cfg.Tasks, cfg.Since, cfg.Deadline, cfg.DeadlineFrom = tasks, tasksStarted(a, tasks), deadline, d.e.nomadNow()()
	if a.ClientStatus != restart.ClientRunning {
		cfg.Since = d.e.nomadNow()()
	}
	g := health.NewReadiness(cfg)
	g.ObserveAlloc(a)
	err = d.judgeReadiness(ctx, g, sources, id, "allocation", index, func(reason string) error {
		onWait(reason)
		return nil
	})
	var failure *allocFailure
	if errors.As(err, &failure) {
		return failure.err
	}
	return err
}

// holdGates measures the restart's gates evenly across wait (every gate at least once, at
// its end): they held when no gate failed more measurements than the policy tolerates.
// With no gate it waits wait.
func (e *Engine) holdGates(ctx context.Context, rec *restart.Record, wait time.Duration, report func(time.Duration)) error {
	start := time.Now()
	g := rec.Spec.Gates
	if g == nil || len(g.Specs) == 0 {
		// No gate: the wait, its progress told every second.
		for held := time.Duration(0); held < wait; {
			step := min(time.Second, wait-held)
			report(held)
			if !(wallClock{}).Sleep(ctx, step) {
				return ctx.Err()
			}
			held += step
		}
		return nil
	}
	specs, err := g.Parsed()
	if err != nil {
		return err
	}
	q, err := e.querier(g.PrometheusAddress)
	if err != nil {
		return err
	}
	if c, ok := q.(interface{ Close() }); ok {
		defer c.Close()
	}
	p := g.Policy
	p.Delay, p.DryRun = 0, false
	interval := p.Interval
	if interval <= 0 || wait < interval {
		interval = max(wait, time.Second)
	}
	p.Count = 1
	if wait > 0 {
		p.Count = int(math.Ceil(float64(wait)/float64(interval))) + 1
		p.Interval = wait / time.Duration(p.Count-1)
	}
	vars := gate.Vars{Job: rec.JobID, Namespace: rec.Namespace, Batch: 1}
	for _, a := range rec.Allocs {
		vars.AllocIDs = append(vars.AllocIDs, a.ID)
		vars.AllocNames = append(vars.AllocNames, a.Name)
	}
	res, err := gate.Run(ctx, q, specs, vars, p, wallClock{}, nil, func(gate.Measurement) error {
		report(min(time.Since(start), wait))
		return nil
	})
	if err != nil {
		return err
	}
	if !res.Passed {
		return fmt.Errorf("a gate failed during -wave-wait %s: %s", wait, res.Failed)
	}
	return nil
}
