package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// start is a child whose start the step stores, to be created once it is stored.
type start struct {
	job   fleet.Job
	child *restart.Record
}

// decide moves next on by fleet.Next: the fleet's start, an operator's answer, the
// decision's status and abandoned jobs, the steering of children (carried out here,
// before the write that records it: forwarding an intent twice is harmless), and the starts
// (planned here, their intents written into next).
func (r *run) decide(ctx context.Context, next *fleet.Record) ([]start, error) {
	now := r.d.now()
	if next.Status == restart.StatusPending {
		next.Status, next.StartTime = restart.StatusRunning, now
		next.AddEvent(now, restart.EventStarted, fmt.Sprintf("Fleet started by %s: %d jobs, at most %d at once", r.d.cfg.Holder, len(next.Jobs), next.Options.MaxParallelJobs))
	}
	next.Driver = r.d.cfg.Holder
	r.answer(next, now)
	d := fleet.Next(next.Fleet)
	before := next.Status
	d.Record(&next.Fleet)
	if len(d.Abandon) > 0 {
		next.AddEvent(now, fleet.EventJobEnded, fmt.Sprintf("%d jobs will not start: %s", len(d.Abandon), d.Reason))
	}
	for _, h := range d.Held {
		next.AddEvent(now, fleet.EventJobEnded, jobMessage(next.Jobs[h.Job]))
	}
	r.settleStatus(next, before, d, now)
	for _, s := range r.steerable(next, d.Steer) {
		r.steer(ctx, next, s)
	}
	return r.plan(ctx, next, d.Start)
}

// answer applies an operator's answer to the fleet's question.
func (r *run) answer(next *fleet.Record, now time.Time) {
	q, c := next.Question, next.Control
	if q == nil || c.Answer == "" || c.AnswerTo != q.ID {
		return
	}
	proceed, err := fleet.ApplyAnswer(next, c.Answer)
	switch {
	case err != nil:
		next.AddEvent(now, restart.EventWarning, fmt.Sprintf("Answer %q ignored: %v", c.Answer, err))
	case proceed:
		next.AddEvent(now, restart.EventAnswer, fmt.Sprintf("Continuing after the failed jobs, as answered%s", byWhom(c)))
	default:
		next.AddEvent(now, restart.EventAnswer, fmt.Sprintf("Fleet failed: %s%s", next.Reason, byWhom(c)))
		next.EndTime = now
	}
}

// settleStatus records the decision's status change, its question, and the fleet's end.
func (r *run) settleStatus(next *fleet.Record, before restart.Status, d fleet.Decision, now time.Time) {
	if d.Status == restart.StatusWaiting && next.Question == nil {
		next.Question = fleet.BudgetQuestion(fmt.Sprintf("fleet-%d", len(next.Events)+1), d.Reason, now)
	}
	if d.Status != restart.StatusWaiting {
		next.Question = nil
	}
	if d.Status == before {
		return
	}
	next.Reason = d.Reason
	typ := fleet.StatusEvent(before, d.Status)
	msg := fmt.Sprintf("Fleet %s", d.Status)
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	next.AddEvent(now, typ, msg)
	if d.Status.Terminal() {
		next.EndTime = now
	}
}

// steer forwards the fleet's intent to one running child and records it as given. A child
// that ended meanwhile refuses it; its end is followed and recorded all the same.
func (r *run) steer(ctx context.Context, next *fleet.Record, s fleet.Steer) {
	job := next.Jobs[s.Job]
	by := "fleet " + short(r.id) + byWhom(next.Control)
	eng := r.d.cfg.Engine
	var err error
	switch s.Intent {
	case restart.IntentPause:
		_, err = eng.Pause(ctx, job.Namespace, job.RestartID, by)
	case restart.IntentCancel:
		_, err = eng.Cancel(ctx, job.Namespace, job.RestartID, by)
	default:
		_, err = eng.Resume(ctx, job.Namespace, job.RestartID, by)
	}
	if err != nil {
		r.d.log.Warn("steering a child of the fleet", "fleet", r.id, "job", job.JobID, "restart", job.RestartID, "intent", s.Intent, "err", err)
	}
	next.Jobs[s.Job].Steered = s.Intent
}

func byWhom(c restart.Control) string {
	if c.By == "" {
		return ""
	}
	return " by " + c.By
}

// plan plans the children of the jobs to start, in parallel (each is a few reads) unless
// planned ahead (preplan.go), and records in next either their start or why the job's
// turn ended without one.
func (r *run) plan(ctx context.Context, next *fleet.Record, idx []int) ([]start, error) {
	children := make([]*restart.Record, len(idx))
	obs := make([]fleet.Observation, len(idx))
	var wg sync.WaitGroup
	// The jobs not planned ahead are planned first, so that their reads overlap the
	// wait for a plan made ahead that is still being made.
	for n, i := range idx {
		if _, ok := r.ahead[keyOf(next.Jobs[i])]; !ok {
			wg.Go(func() { children[n], obs[n] = r.planChild(ctx, next, next.Jobs[i]) })
		}
	}
	for n, i := range idx {
		if _, ok := r.ahead[keyOf(next.Jobs[i])]; !ok {
			continue
		}
		if child, o, ok := r.plannedFor(ctx, next.Jobs[i]); ok {
			children[n], obs[n] = child, o
			continue
		}
		wg.Go(func() { children[n], obs[n] = r.planChild(ctx, next, next.Jobs[i]) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	var starts []start
	wave := next.WaveReached()
	defer func() { noteWaves(next, wave, r.d.now()) }()
	for n, i := range idx {
		before := next.Jobs[i]
		if err := fleet.Observe(&next.Fleet, obs[n]); err != nil {
			return nil, fmt.Errorf("starting a job of fleet %s: %w", short(r.id), err)
		}
		r.noteChange(next, before, next.Jobs[i])
		if children[n] != nil {
			starts = append(starts, start{job: next.Jobs[i], child: children[n]})
		}
	}
	return starts, nil
}

// planChild plans one job's child; without a child, the observation says why.
func (r *run) planChild(ctx context.Context, rec *fleet.Record, job fleet.Job) (*restart.Record, fleet.Observation) {
	obs := fleet.Observation{Namespace: job.Namespace, JobID: job.JobID}
	if obs.Failed = r.consentFailure(ctx, rec, job); obs.Failed != "" {
		return nil, obs
	}
	spec, problems := onchange.JobOptions(rec.Spec, job.Meta)
	if len(problems) > 0 {
		obs.Failed = "its nomad-restart meta is invalid: " + problems[0].String()
		return nil, obs
	}
	id := fleet.ChildID(rec.ID, job.Namespace, job.JobID)
	p, err := r.d.planJob(ctx, job, id, spec)
	dc, outside := outsideDatacenter(err)
	switch {
	case errors.Is(err, cluster.ErrJobNotFound):
		obs.Purged = true
		return nil, obs
	case outside:
		// A datacenter of the fleet's options that this job does not run in: nothing of
		// it to restart, as a job without allocations there.
		obs.Skip = fmt.Sprintf("it does not run in datacenter %q", dc)
		return nil, obs
	case err != nil:
		obs.Failed = oneLine(err.Error())
		return nil, obs
	case len(p.Record.Allocs) == 0:
		obs.Skip = "it had no allocation to restart when its turn came"
		return nil, obs
	}
	p.Record.Fleet = rec.ID
	p.Record.Cluster = rec.Cluster
	obs.RestartID, obs.ChildStatus = id, restart.StatusPending
	return p.Record, obs
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
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

// noteEvidence logs an upstream's verdict to the fleet's events.
func noteEvidence(next *fleet.Record, ref fleet.Ref, before, after fleet.Evidence, now time.Time) {
	name := fmt.Sprintf("Upstream %q (namespace %q)", ref.JobID, ref.Namespace)
	switch {
	case after.Ready && !before.Ready:
		next.AddEvent(now, fleet.EventJobWaiting, name+" gave its evidence: its allocations are healthy and its gates held; the jobs after it may start")
	case after.Unready != "" && before.Unready == "":
		next.AddEvent(now, fleet.EventJobEnded, name+" "+after.Unready+": the jobs after it are held back (skipped, or started only on an operator's yes)")
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
