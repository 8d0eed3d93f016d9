package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// create files the children whose start is stored and follows each, every child in a
// goroutine of its own: the loop's next step does not wait for a creation's round trips.
// Until a child's record exists (a created fact) the loop does not steer it. A child that
// exists already (a driver died after creating it) is followed as it is. One that cannot
// be created is taken back at the next step (an unstart fact): the job waits for the
// restart that made it busy, or fails with the reason.
func (r *run) create(ctx context.Context, starts []start) {
	for _, s := range starts {
		if r.followed[s.job.RestartID] {
			continue
		}
		r.followed[s.job.RestartID] = true
		r.creating[s.job.RestartID] = true
		r.wg.Go(func() {
			h, err := r.createChild(ctx, s.child)
			if err != nil && !errors.Is(err, store.ErrExists) {
				r.report(ctx, fact{unstart: true, obs: unstartOf(s.job, err), child: s.job.RestartID})
				return
			}
			r.report(ctx, fact{created: s.job.RestartID})
			if err != nil {
				r.followToEnd(ctx, s.job, nil, nil) // created by a driver before this one
				return
			}
			r.followToEnd(ctx, s.job, s.child, h)
		})
	}
}

// createChild files a child. A driver that drives its children (the CLI) creates each with
// its lease held, to drive it from its first write: an agent, which takes up the restarts
// no process drives, never takes a child up first. Without that (the agent's fleets), the
// child is left to whoever adopts it, and h is nil.
func (r *run) createChild(ctx context.Context, child *restart.Record) (h *engine.Held, err error) {
	if r.d.cfg.DriveChildren {
		return r.d.cfg.Engine.CreateHeld(ctx, child)
	}
	return nil, r.d.cfg.Engine.Create(ctx, child)
}

// unstartOf is the fact that takes back a start whose child could not be created.
func unstartOf(job fleet.Job, err error) fleet.Observation {
	obs := fleet.Observation{Namespace: job.Namespace, JobID: job.JobID}
	var busy *store.JobBusyError
	if errors.As(err, &busy) {
		obs.BusyWith = busy.RestartID
	} else {
		obs.Failed = "its restart could not be recorded: " + oneLine(err.Error())
	}
	return obs
}

// follow follows a child to its end, driving it here when the driver drives children,
// and reports its end as a fact.
func (r *run) follow(ctx context.Context, job fleet.Job) {
	if r.followed[job.RestartID] {
		return
	}
	r.followed[job.RestartID] = true
	r.wg.Go(func() { r.followToEnd(ctx, job, nil, nil) })
}

// followToEnd follows the child until it ends and reports its end; created is its record
// as this driver's Create returned it (nil: not created here), and h, when not nil, the
// child created with its lease held, to drive first.
func (r *run) followToEnd(ctx context.Context, job fleet.Job, created *restart.Record, h *engine.Held) {
	rec, err := r.untilEnd(ctx, job, created, h, r.d.cfg.DriveChildren)
	if err != nil {
		return // ctx ended: the child is left as stored, to be resumed
	}
	obs := fleet.Observation{Namespace: job.Namespace, JobID: job.JobID, RestartID: job.RestartID, ChildStatus: rec.Status}
	if rec.Status == restart.StatusFailed {
		obs.ChildError = rec.Reason
	}
	r.report(ctx, fact{obs: obs})
}

// followBusy follows the restart a pending job waits for (-busy wait) and, when it ends,
// reports the job free to start.
func (r *run) followBusy(ctx context.Context, obs fleet.Observation) {
	if r.followed[obs.BusyWith] {
		return
	}
	r.followed[obs.BusyWith] = true
	other := fleet.Job{Namespace: obs.Namespace, JobID: obs.JobID, RestartID: obs.BusyWith}
	r.wg.Go(func() {
		if _, err := r.untilEnd(ctx, other, nil, nil, false); err != nil {
			return
		}
		r.report(ctx, fact{obs: fleet.Observation{Namespace: obs.Namespace, JobID: obs.JobID}})
	})
}

func (r *run) report(ctx context.Context, f fact) {
	select {
	case r.facts <- f:
	case <-ctx.Done():
	}
}

// untilEnd returns the restart's record once it ended. With drive, it drives the restart
// here whenever no other driver holds it (the first time with Engine.DriveHeld when h, the
// child this driver created with its lease, is given); otherwise it follows the record.
// created is the record this driver's Create returned (nil: not created here). A restart
// whose record is gone counts as failed.
func (r *run) untilEnd(ctx context.Context, job fleet.Job, created *restart.Record, h *engine.Held, drive bool) (*restart.Record, error) {
	sink := r.childSink(job, created)
	for {
		if drive {
			var rec *restart.Record
			var err error
			if h != nil {
				rec, err = r.d.cfg.Engine.DriveHeld(ctx, h, sink)
				h = nil // once: a later attempt is an ordinary resume
			} else {
				rec, err = r.d.cfg.Engine.Drive(ctx, job.Namespace, job.RestartID, sink)
			}
			if err == nil && rec.Status.Terminal() {
				return rec, nil
			}
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if errors.Is(err, store.ErrNotFound) {
				return gone(job), nil
			}
			if !errors.Is(err, store.ErrLeaseHeld) {
				r.d.log.Warn("driving a child of the fleet", "fleet", r.id, "restart", job.RestartID, "err", err)
			}
		}
		rec, err := r.watchChild(ctx, job, drive)
		switch {
		case rec != nil:
			return rec, nil
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.Is(err, store.ErrNotFound):
			return gone(job), nil
		case err != nil:
			r.d.log.Warn("following a child of the fleet", "fleet", r.id, "restart", job.RestartID, "err", err)
			if !cluster.Sleep(ctx, r.probeEvery()) {
				return nil, context.Cause(ctx)
			}
		}
	}
}

// gone is the end of a child whose record was deleted before the fleet saw it end.
func gone(job fleet.Job) *restart.Record {
	return &restart.Record{ID: job.RestartID, Status: restart.StatusFailed, Reason: fmt.Sprintf("restart %s's record is gone", job.RestartID)}
}

// watchChild follows the restart's record until it ends (returned) or, with probeLease,
// until its lease is free (nil, nil): its driver let go or died, and the caller drives it.
func (r *run) watchChild(ctx context.Context, job fleet.Job, probeLease bool) (*restart.Record, error) {
	var index uint64
	for {
		wctx, cancel := context.WithTimeout(ctx, r.probeEvery())
		rec, err := r.d.cfg.Restarts.WatchHead(wctx, job.Namespace, job.RestartID, index)
		timedOut := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil && rec.Status.Terminal():
			return rec, nil
		case err == nil:
			index = rec.ModifyIndex
		case !timedOut:
			return nil, err
		}
		if probeLease && timedOut {
			free, err := store.LeaseFree(ctx, r.d.cfg.Restarts, job.Namespace, job.RestartID, r.d.cfg.Holder)
			if err == nil && free {
				return nil, nil
			}
		}
	}
}

// childSink passes a child's events to the fleet's sink, naming the job. When the child
// starts its last batch (known from created, its record as planned), the job's slot frees
// soon: the loop is told, and plans the next job ahead.
func (r *run) childSink(job fleet.Job, created *restart.Record) func(restart.Event) {
	last := 0
	if created != nil {
		last = created.Batches
	}
	return func(e restart.Event) {
		if last > 0 && e.Type == restart.EventBatchStarted && e.Batch == last {
			select {
			case r.soon <- struct{}{}:
			default: // as many are pending as the loop can use
			}
		}
		r.emit(Event{Fleet: r.id, Namespace: job.Namespace, JobID: job.JobID, RestartID: job.RestartID, Event: e})
	}
}

// probeEvery is how often a lease held by another driver is probed: the store's lease TTL
// (no sooner can a silent driver's lease expire), at most 2 s and at least 10 ms.
func (r *run) probeEvery() time.Duration {
	if r.d.cfg.ProbeEvery > 0 {
		return r.d.cfg.ProbeEvery
	}
	if ttl, _ := r.d.cfg.Restarts.LeaseExpiry(); ttl > 0 {
		return min(max(ttl/4, 10*time.Millisecond), 2*time.Second)
	}
	return 2 * time.Second
}

// A fleet in waves starts a job only on its upstreams' evidence (fleet.GateOf). The driver
// measures it (Engine.Evidence) for each upstream fleet.Unproven names, in a goroutine of
// its own, and reports its progress and verdict as facts; the verdict is stored in the
// fleet record before any downstream job starts (its start is decided from the stored
// record), so a driver killed while an upstream is measured measures it again from the
// start: a downstream job never starts on evidence nobody saw.

// progressEvery bounds how often an upstream's progress, when its count of healthy
// allocations stays the same (another reason, the gates' time held), is written to the
// fleet record.
const progressEvery = 2 * time.Second

// measureUnproven starts measuring the upstreams whose evidence the stored fleet waits for
// and that this drive does not measure yet.
func (r *run) measureUnproven(ctx context.Context) {
	for _, ref := range fleet.Unproven(r.rec.Fleet) {
		if r.measuring[ref] {
			continue
		}
		r.measuring[ref] = true
		spec, wait := r.evidenceSpec(ref)
		r.wg.Go(func() { r.measure(ctx, ref, spec, wait) })
	}
}

// measure measures one upstream's evidence until its verdict, reporting progress as it
// goes. A failure that passes (Nomad unavailable), or a deployment of the upstream in
// progress, is measured again.
func (r *run) measure(ctx context.Context, ref fleet.Ref, spec restart.Spec, wait time.Duration) {
	var last fleet.Evidence
	var lastAt time.Time
	var lastHealthy int
	progress := func(p engine.EvidenceProgress) {
		m := fleet.Measuring{Healthy: p.Healthy, Total: p.Total, Why: p.Why, GatesHeld: p.GatesHeld.Round(time.Second).String(), WaveWait: wait.String()}
		ev := fleet.Evidence{Waits: m.Text()}
		now := time.Now()
		if ev == last || (p.Healthy == lastHealthy && now.Sub(lastAt) < progressEvery) {
			return
		}
		last, lastAt, lastHealthy = ev, now, p.Healthy
		r.reportEvidence(ctx, ref, ev)
	}
	var deploying *engine.DeploymentError
	for {
		err := r.d.cfg.Engine.Evidence(ctx, ref.Namespace, ref.JobID, spec, wait, progress)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			r.reportEvidence(ctx, ref, fleet.Evidence{Ready: true})
			return
		case errors.As(err, &deploying):
			// A deployment of it runs (an upstream outside the fleet being updated): its
			// allocations are not settled yet, which is a wait, not a failure.
			progress(engine.EvidenceProgress{Why: oneLine(err.Error())})
			if !cluster.Sleep(ctx, r.probeEvery()) {
				return
			}
		case cluster.IsTransient(err):
			r.d.log.Warn("measuring an upstream's evidence", "fleet", r.id, "job", ref.JobID, "err", err)
			if !cluster.Sleep(ctx, r.probeEvery()) {
				return
			}
		default:
			r.reportEvidence(ctx, ref, fleet.Evidence{Unready: unreadyText(err, spec)})
			return
		}
	}
}

// unreadyText says why an upstream gave no evidence.
func unreadyText(err error, spec restart.Spec) string {
	if errors.Is(err, cluster.ErrJobNotFound) {
		return "is gone from Nomad"
	}
	return fmt.Sprintf("was not healthy (-health %s): %s", spec.Health, oneLine(err.Error()))
}

func (r *run) reportEvidence(ctx context.Context, ref fleet.Ref, ev fleet.Evidence) {
	r.report(ctx, fact{obs: fleet.Observation{Namespace: ref.Namespace, JobID: ref.JobID, Evidence: &ev}})
}
