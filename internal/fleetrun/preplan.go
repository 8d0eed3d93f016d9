package fleetrun

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// A job's plan is a few reads of Nomad (the job, its versions, deployments and
// allocations). Made when the job's slot frees, its round trips delay the job's start and
// hold up the loop, which plans each start before storing it. So when a child driven here
// starts its last batch, the loop plans the next pending job ahead, and the job's start
// takes that plan when its turn comes, if it is fresh: what `run` does when it shows its
// plan and waits for a yes. Its checks are made again before each batch, by the child
// (the deployment guard, the budget, each allocation's eligibility); an allocation placed
// after the plan started after it, so it needs no restart.

// maxSoon bounds the notices of a slot about to free that wait for the loop: more than a
// fleet's slots (-max-parallel-jobs) are never about to free at once, and a notice beyond
// it only loses one plan made ahead.
const maxSoon = 256

// planFreshness is how old a plan made ahead may be when its job's turn comes; an older
// one is made again.
const planFreshness = 10 * time.Second

// plannedChild is a job's plan made ahead; done is closed once child and obs are set.
type plannedChild struct {
	at    time.Time
	done  chan struct{}
	child *restart.Record
	obs   fleet.Observation
}

// planAhead plans, in the background, the first upcoming job (fleet.Upcoming) not planned
// yet, and forgets plans that can no longer be used. As many jobs are planned ahead as
// slots are about to free, up to the fleet's -max-parallel-jobs: children started together
// end together, and each freed slot then has its job's plan at hand.
func (r *run) planAhead(ctx context.Context) {
	now := r.d.now()
	for k, p := range r.ahead {
		if now.Sub(p.at) > planFreshness {
			delete(r.ahead, k)
		}
	}
	rec := r.rec
	for _, i := range fleet.Upcoming(rec.Fleet, rec.Options.MaxParallelJobs) {
		job := rec.Jobs[i]
		if _, ok := r.ahead[keyOf(job)]; ok {
			continue
		}
		p := &plannedChild{at: now, done: make(chan struct{})}
		r.ahead[keyOf(job)] = p
		r.wg.Go(func() {
			defer close(p.done)
			p.child, p.obs = r.planChild(ctx, rec, job)
		})
		return
	}
}

// plannedFor takes the plan made ahead for job, waiting for it if it is being made; ok is
// false when there is none fresh enough, and the caller plans the job now. Only a plan
// with a child is taken: a job whose plan found a reason not to start it (or failed to
// read Nomad) is planned again at its turn, which decides.
func (r *run) plannedFor(ctx context.Context, job fleet.Job) (child *restart.Record, obs fleet.Observation, ok bool) {
	p := r.ahead[keyOf(job)]
	if p == nil {
		return nil, obs, false
	}
	delete(r.ahead, keyOf(job))
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, obs, false
	}
	now := r.d.now()
	if p.child == nil || now.Sub(p.at) > planFreshness {
		return nil, obs, false
	}
	// The record is created now, not when it was planned.
	p.child.CreateTime, p.child.ModifyTime = now, now
	return p.child, p.obs, true
}
