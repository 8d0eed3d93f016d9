package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// jobKey names a job across namespaces.
type jobKey struct{ namespace, jobID string }

func keyOf(j fleet.Job) jobKey { return jobKey{j.Namespace, j.JobID} }

// run is one drive of one fleet.
type run struct {
	d     *Driver
	ns    string
	id    string
	sink  func(Event)
	sinkM sync.Mutex

	rec *fleet.Record // as last stored
	// seen holds the newest fact observed of each job since the last step that stored its
	// facts, applied again at every try of a step (Observe is idempotent), so a write lost
	// to a conflict loses no fact.
	seen map[jobKey]fleet.Observation
	// unstarts are starts to take back at the next step (their child could not be created).
	unstarts []fleet.Observation
	// followed marks the restarts followed (children, and restarts busy jobs wait for).
	followed map[string]bool
	// members holds the fleet's member markers read by this drive, by namespace (consent.go).
	members  map[string]memberRead
	membersM sync.Mutex
	// ahead holds the plans made ahead of their jobs' turn (preplan.go); the loop's own.
	ahead map[jobKey]*plannedChild
	// creating marks the children whose creation is in flight: steering them waits until
	// their record exists (a created fact), or the intent would be recorded as given to a
	// restart that never heard it.
	creating map[string]bool
	// measuring marks the upstreams whose evidence this drive measures (follow.go); evidence
	// holds their newest facts since the last step, as seen does the jobs'.
	measuring map[fleet.Ref]bool
	evidence  map[fleet.Ref]fleet.Observation
	facts     chan fact
	rung      chan struct{}
	// soon is told each time a child driven here starts its last batch: a slot frees soon.
	soon chan struct{}
	wg   sync.WaitGroup
}

// fact is what the loop learns from its followers: an observation of a job, or (unstart)
// a start to take back because its child could not be created.
type fact struct {
	obs     fleet.Observation
	unstart bool
	// child is the ID of the child an unstart takes back: no longer followed, so that the
	// job's next start (the same ID) creates it again.
	child string
	// created is the ID of a child whose record now exists (the fact carries nothing else).
	created string
}

func newRun(d *Driver, namespace, id string, sink func(Event)) *run {
	return &run{d: d, ns: namespace, id: id, sink: sink, seen: map[jobKey]fleet.Observation{},
		followed: map[string]bool{}, members: map[string]memberRead{}, ahead: map[jobKey]*plannedChild{}, creating: map[string]bool{},
		measuring: map[fleet.Ref]bool{}, evidence: map[fleet.Ref]fleet.Observation{},
		facts: make(chan fact, 64), rung: make(chan struct{}, 1), soon: make(chan struct{}, maxSoon)}
}

// drive is the loop: load, then step and wait until the fleet ends.
func (r *run) drive(ctx context.Context) (*fleet.Record, error) {
	defer r.wg.Wait()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	token, err := r.firstToken(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	if r.rec.Status.Terminal() {
		return r.rec, nil // nothing to do, and nothing to write
	}
	r.wg.Go(func() { r.watchControl(ctx, token) })
	if o := r.d.cfg.Outbox; o != nil {
		o.StoredFleet(r.ns, r.id) // what a former driver left unsent
	}
	for {
		if err := r.step(ctx); err != nil {
			return r.rec, err
		}
		if r.rec.Status.Terminal() {
			return r.rec, nil
		}
		r.measureUnproven(ctx)
		if !r.settled() {
			continue // a job's turn ended at once (skipped, failed to plan): decide again
		}
		if err := r.wait(ctx); err != nil {
			return r.rec, err
		}
	}
}

// settled reports whether the stored fleet leaves nothing to do until a fact or an
// operator's change arrives: the rules would start, steer (a child that exists) or abandon
// nothing and keep its status.
func (r *run) settled() bool {
	if len(r.unstarts) > 0 {
		return false
	}
	d := fleet.Next(r.rec.Fleet)
	return len(d.Start) == 0 && len(r.steerable(r.rec, d.Steer)) == 0 && len(d.Abandon) == 0 && len(d.Held) == 0 && d.Status == r.rec.Status
}

// steerable leaves out of steers the children whose creation is in flight: they are
// steered at the step after their creation.
func (r *run) steerable(rec *fleet.Record, steers []fleet.Steer) []fleet.Steer {
	var out []fleet.Steer
	for _, s := range steers {
		if !r.creating[rec.Jobs[s.Job].RestartID] {
			out = append(out, s)
		}
	}
	return out
}

// load reads the fleet and follows the children its record says are running. A running
// job outside the fleet's home whose namespace does not consent (consentFailure) is taken
// back and failed instead: its recorded child is neither followed nor steered.
func (r *run) load(ctx context.Context) error {
	rec, err := r.d.cfg.Fleets.Get(ctx, r.ns, r.id)
	if err != nil {
		return fmt.Errorf("reading fleet %s: %w", short(r.id), err)
	}
	r.rec = rec
	if rec.Status.Terminal() {
		return nil
	}
	var missing []fleet.Job
	for _, j := range rec.Jobs {
		if j.Status != fleet.JobRunning || j.RestartID == "" {
			continue
		}
		if reason := r.consentFailure(ctx, rec, j); reason != "" {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			r.unstarts = append(r.unstarts, fleet.Observation{Namespace: j.Namespace, JobID: j.JobID, Failed: reason})
			continue
		}
		_, err := r.d.cfg.Restarts.Get(ctx, j.Namespace, j.RestartID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			missing = append(missing, j)
		case err != nil:
			return fmt.Errorf("reading restart %s of job %q of fleet %s: %w", short(j.RestartID), j.JobID, short(r.id), err)
		default:
			r.follow(ctx, j)
		}
	}
	return r.createMissing(ctx, missing)
}

// createMissing files the children whose start a driver stored but did not live to create:
// planned now, with the allocations the job has now.
func (r *run) createMissing(ctx context.Context, jobs []fleet.Job) error {
	var starts []start
	for _, j := range jobs {
		child, obs := r.planChild(ctx, r.rec, j)
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if child == nil {
			r.unstarts = append(r.unstarts, obs)
			continue
		}
		starts = append(starts, start{job: j, child: child})
	}
	r.create(ctx, starts)
	return nil
}

// wait blocks until a fact, a ring, or ctx's end; facts that arrived together are taken
// together, so a burst of ends is one write. A slot about to free meanwhile has the next
// job planned ahead.
func (r *run) wait(ctx context.Context) error {
	if len(r.unstarts) > 0 {
		return nil
	}
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case f := <-r.facts:
			r.take(ctx, f)
			// A child's creation matters only to a steer waiting for it (steerable).
			waiting = f.created != "" && r.settled()
		case <-r.rung:
			if err := r.reload(ctx); err != nil {
				return err
			}
			waiting = false
		case <-r.soon:
			r.planAhead(ctx)
		}
	}
	for {
		select {
		case f := <-r.facts:
			r.take(ctx, f)
		default:
			return nil
		}
	}
}

// take applies a fact to what the next step observes. A start taken back because the job
// is busy has the job wait for that restart to end.
func (r *run) take(ctx context.Context, f fact) {
	if f.created != "" {
		delete(r.creating, f.created)
		return
	}
	if f.obs.Evidence != nil {
		r.evidence[fleet.Ref{Namespace: f.obs.Namespace, JobID: f.obs.JobID}] = f.obs
		return
	}
	if !f.unstart {
		r.seen[keyOf(fleet.Job{Namespace: f.obs.Namespace, JobID: f.obs.JobID})] = f.obs
		return
	}
	r.unstarts = append(r.unstarts, f.obs)
	delete(r.followed, f.child)
	delete(r.creating, f.child)
	if f.obs.BusyWith != "" {
		r.followBusy(ctx, f.obs)
	}
}

// reload reads the fleet after a ring: an operator changed its Control.
func (r *run) reload(ctx context.Context) error {
	rec, err := r.d.cfg.Fleets.Get(ctx, r.ns, r.id)
	if err != nil {
		return fmt.Errorf("reading fleet %s after an operator's change: %w", short(r.id), err)
	}
	r.rec = rec
	return nil
}

// step applies what was observed, decides, carries out the decision's steering and plans
// the starts, stores the result (one write), then creates the children whose start it
// stored. On a conflict (an operator's write meanwhile) it reads the fleet and decides again.
func (r *run) step(ctx context.Context) error {
	for {
		next := clone(r.rec)
		if err := r.observe(next); err != nil {
			return err
		}
		starts, err := r.decide(ctx, next)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(next, r.rec) {
			err := r.d.cfg.Fleets.Update(ctx, next)
			if errors.Is(err, store.ErrConflict) {
				if err := r.reload(ctx); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("recording fleet %s: %w", short(r.id), err)
			}
			r.emitNew(r.rec, next)
			if o := r.d.cfg.Outbox; o != nil && len(next.Events) > 0 && (len(r.rec.Events) == 0 || next.Events[len(next.Events)-1].Seq != r.rec.Events[len(r.rec.Events)-1].Seq) {
				o.StoredFleet(r.ns, r.id)
			}
		}
		r.rec = next
		r.unstarts = nil
		// The facts are in the record now, the stored one too: a later conflict reads them
		// back with it.
		clear(r.seen)
		clear(r.evidence)
		r.create(ctx, starts)
		return nil
	}
}

// observe applies the facts seen and the starts to take back to next.
func (r *run) observe(next *fleet.Record) error {
	for _, obs := range r.unstarts {
		if err := fleet.Unstart(&next.Fleet, obs); err != nil {
			return err
		}
	}
	for i, j := range next.Jobs {
		obs, ok := r.seen[keyOf(j)]
		if !ok {
			continue
		}
		before := next.Jobs[i]
		if err := fleet.Observe(&next.Fleet, obs); err != nil {
			return fmt.Errorf("observing fleet %s: %w", short(r.id), err)
		}
		r.noteChange(next, before, next.Jobs[i])
	}
	for ref, obs := range r.evidence {
		before := next.EvidenceOf(ref)
		if err := fleet.Observe(&next.Fleet, obs); err != nil {
			return fmt.Errorf("observing fleet %s: %w", short(r.id), err)
		}
		noteEvidence(next, ref, before, next.EvidenceOf(ref), r.d.now())
	}
	return nil
}

// noteChange logs a job's move to the fleet's events.
func (r *run) noteChange(next *fleet.Record, before, after fleet.Job) {
	if before.Status == after.Status && before.BusyWith == after.BusyWith {
		return
	}
	typ := fleet.EventJobEnded
	switch after.Status {
	case fleet.JobRunning:
		typ = fleet.EventJobStarted
	case fleet.JobPending:
		typ = fleet.EventJobWaiting
	}
	next.AddEvent(r.d.now(), typ, jobMessage(after))
}

// jobMessage says where a job of the fleet stands, for the fleet's events.
func jobMessage(j fleet.Job) string {
	name := fmt.Sprintf("Job %q (namespace %q)", j.JobID, j.Namespace)
	switch {
	case j.Status == fleet.JobRunning:
		return fmt.Sprintf("%s started: restart %s", name, j.RestartID)
	case j.Status == fleet.JobPending && j.BusyWith != "":
		return fmt.Sprintf("%s %s", name, j.Reason)
	case j.Reason != "":
		return fmt.Sprintf("%s %s: %s", name, j.Status, j.Reason)
	}
	return fmt.Sprintf("%s %s", name, j.Status)
}

// emitNew sends the events next holds beyond before's.
func (r *run) emitNew(before, next *fleet.Record) {
	if r.sink == nil {
		return
	}
	var last uint64
	if n := len(before.Events); n > 0 {
		last = before.Events[n-1].Seq
	}
	counts := next.Counts()
	for _, e := range next.Events {
		if e.Seq > last {
			r.emit(Event{Fleet: r.id, Counts: counts, Event: e})
		}
	}
}

func (r *run) emit(e Event) {
	if r.sink == nil {
		return
	}
	r.sinkM.Lock()
	defer r.sinkM.Unlock()
	r.sink(e)
}

// clone copies what a step changes, so that the stored fleet stays as read when a write fails.
func clone(rec *fleet.Record) *fleet.Record {
	out := *rec
	out.Jobs = slices.Clone(rec.Jobs)
	out.Events = slices.Clone(rec.Events)
	if rec.Question != nil {
		q := *rec.Question
		out.Question = &q
	}
	return &out
}
