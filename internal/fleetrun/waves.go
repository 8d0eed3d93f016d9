package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// A fleet in waves starts a job only on its upstreams' evidence (fleet.GateOf). The driver
// measures it (Engine.Evidence) for each upstream fleet.Unproven names, in a goroutine of
// its own, and reports its progress and verdict as facts; the verdict is stored in the
// fleet record before any downstream job starts (its start is decided from the stored
// record), so a driver killed while an upstream is measured measures it again from the
// start: a downstream job never starts on evidence nobody saw.

// progressEvery bounds how often an upstream's progress, when only its figures change
// (the min-healthy timer, the gates' time held), is written to the fleet record.
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

// evidenceSpec is what an upstream's evidence is measured with: for a job of the fleet,
// its child's options (the fleet's with its meta: its health gate and its gates) and the
// fleet's -wave-wait; for an upstream outside the fleet, the fleet's health options and no
// wait: it was not restarted, and its health is all that is asked of it.
func (r *run) evidenceSpec(ref fleet.Ref) (restart.Spec, time.Duration) {
	for _, j := range r.rec.Jobs {
		if fleet.RefOf(j) == ref {
			spec, _ := onchange.JobOptions(r.rec.Spec, j.Meta)
			return spec, r.rec.Options.WaveWait
		}
	}
	spec := r.rec.Spec
	spec.Gates = nil
	return spec, 0
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
		if ev == last || (p.Healthy == lastHealthy && now.Sub(lastAt) < progressEvery && kindOf(ev.Waits) == kindOf(last.Waits)) {
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

// kindOf is a progress text without its figures, so that a timer's progress is not a new
// kind of wait.
func kindOf(s string) string {
	return strings.Map(func(c rune) rune {
		if c >= '0' && c <= '9' {
			return -1
		}
		return c
	}, s)
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

// noteEvidence logs an upstream's verdict to the fleet's events.
func noteEvidence(next *fleet.Record, ref fleet.Ref, before, after fleet.Evidence, now time.Time) {
	name := fmt.Sprintf("Upstream %q (namespace %q)", ref.JobID, ref.Namespace)
	switch {
	case after.Ready && !before.Ready:
		next.AddEvent(now, fleet.EventJobWaiting, name+" gave its evidence: its allocations are healthy and its gates held; the jobs after it may start")
	case after.Unready != "" && before.Unready == "":
		next.AddEvent(now, fleet.EventJobEnded, name+" "+after.Unready+": the jobs after it will not start")
	}
}

// noteWaves logs the start of each wave that its first job's start opens.
func noteWaves(next *fleet.Record, before int, now time.Time) {
	after := next.WaveReached()
	for w := before + 1; w <= after; w++ {
		var names []string
		for _, i := range next.WaveOf(w) {
			names = append(names, next.Jobs[i].JobID)
		}
		next.AddEvent(now, fleet.EventWaveStarted, fmt.Sprintf("Wave %d of %d started: %s", w, next.Waves(), strings.Join(names, ", ")))
	}
}

// evidenceOf is the stored evidence of ref in rec (zero when none).
func evidenceOf(rec *fleet.Record, ref fleet.Ref) fleet.Evidence {
	for _, j := range rec.Jobs {
		if fleet.RefOf(j) == ref {
			return j.Evidence
		}
	}
	for _, o := range rec.Outside {
		if o.Namespace == ref.Namespace && o.JobID == ref.JobID {
			return o.Evidence
		}
	}
	return fleet.Evidence{}
}
