package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// attachFleet is `attach <fleet-id>`: follow the fleet and its running restarts until it
// ends. Ctrl-C stops following; the fleet goes on.
func (a *app) attachFleet(ctx context.Context, p *printer, ft *fleetTarget) error {
	rec := ft.rec
	if !p.json {
		id := shortID(rec.ID, p.verbose)
		p.header(a.now(), fmt.Sprintf("Attached to fleet %s (status: %s, %s)", id, rec.Status, fleetJobsShort(rec.Fleet)))
		if _, state := a.fleetLease(ctx, ft); !rec.Status.Terminal() && state == leaseFree {
			p.detail(a.now(), fmt.Sprintf("No process drives this fleet now; continue it with `nomad-restart resume %s`", id))
		}
	}
	return a.followFleet(ctx, p, ft, false, nil)
}

// fleetFollower shows a fleet's events and its running children's as they are stored.
type fleetFollower struct {
	a        *app
	p        *printer
	ft       *fleetTarget
	across   bool
	progress *fleetProgress

	mu sync.Mutex
	// last is, per child restart followed, the last event shown.
	last map[string]uint64
	jobs map[string]fleet.Job
	wg   sync.WaitGroup
}

// followFleet shows the fleet from its record as it changes (Fleets.WatchFleet) and each
// running child from its own record, until the fleet ends (exit 0 only if it succeeded) or
// ctx ends (which stops the viewer only). skipOld skips the events already stored. When
// free (may be nil) closes, it returns errLeaseFree so that the caller may take over.
func (a *app) followFleet(ctx context.Context, p *printer, ft *fleetTarget, skipOld bool, free <-chan struct{}) error {
	rec := ft.rec
	f := &fleetFollower{a: a, p: p, ft: ft, across: rec.Selection.Namespace == "*", last: map[string]uint64{}, jobs: map[string]fleet.Job{},
		progress: newFleetProgress(rec)}
	childCtx, stopChildren := context.WithCancel(ctx)
	defer stopChildren()
	var lastSeq uint64
	if skipOld {
		lastSeq = lastFleetSeq(rec)
	}
	first := true
	for {
		lastSeq = f.showFleet(rec, lastSeq)
		f.followChildren(childCtx, rec, first && skipOld)
		first = false
		if rec.Status.Terminal() {
			stopChildren()
			f.wg.Wait()
			f.flushChildren(ctx)
			p.clearProgress()
			return a.fleetReport(p, rec)
		}
		next, err := f.next(ctx, rec, free)
		if err != nil {
			return err
		}
		rec = next
	}
}

// next waits for the fleet's next stored change, ctx's end or a free lease.
func (f *fleetFollower) next(ctx context.Context, rec *fleet.Record, free <-chan struct{}) (*fleet.Record, error) {
	type result struct {
		rec *fleet.Record
		err error
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan result, 1)
	go func() {
		next, err := f.ft.ses.fleetStore().Watch(wctx, rec.Namespace, rec.ID, rec.ModifyIndex)
		done <- result{next, err}
	}()
	id := shortID(rec.ID, f.p.verbose)
	tick := time.NewTicker(time.Second) // the progress line's elapsed time moves on
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			f.drawProgress(rec)
		case <-ctx.Done():
			f.p.clearProgress()
			f.a.stoppedFollowingFleet(ctx, f.ft, rec)
			return nil, &exitError{code: 1}
		case <-free:
			f.p.clearProgress()
			return nil, errLeaseFree
		case r := <-done:
			if r.err != nil {
				f.p.clearProgress()
				if ctx.Err() != nil {
					f.a.stoppedFollowingFleet(ctx, f.ft, rec)
					return nil, &exitError{code: 1}
				}
				return nil, fmt.Errorf("following fleet %s: %s; try `nomad-restart attach %s` again", id, fleetStoreErrorText(r.err), id)
			}
			return r.rec, nil
		}
	}
}

// showFleet prints the fleet's events after lastSeq, redraws the progress line, and
// returns the last event shown.
func (f *fleetFollower) showFleet(rec *fleet.Record, lastSeq uint64) uint64 {
	for _, ev := range rec.Events {
		if ev.Seq > lastSeq {
			f.a.printFleetEvent(f.p, fleetrun.Event{Fleet: rec.ID, Event: ev}, f.across, true)
			lastSeq = ev.Seq
		}
	}
	f.progress.set(rec)
	f.drawProgress(rec)
	return lastSeq
}

// drawProgress redraws the fleet's progress line, on a terminal, while the fleet runs.
func (f *fleetFollower) drawProgress(rec *fleet.Record) {
	if f.p.showsProgress() && !rec.Status.Terminal() {
		f.p.setProgress(f.progress.line(f.a.now()))
	}
}

func lastFleetSeq(rec *fleet.Record) uint64 {
	if n := len(rec.Events); n > 0 {
		return rec.Events[n-1].Seq
	}
	return 0
}

// followChildren starts following each running child not followed yet. skipOld skips the
// events a child had stored already (those running when the viewer came).
func (f *fleetFollower) followChildren(ctx context.Context, rec *fleet.Record, skipOld bool) {
	for _, j := range rec.Jobs {
		if j.Status != fleet.JobRunning || j.RestartID == "" {
			continue
		}
		f.mu.Lock()
		_, followed := f.last[j.RestartID]
		if !followed {
			f.last[j.RestartID] = 0
			f.jobs[j.RestartID] = j
		}
		f.mu.Unlock()
		if !followed {
			f.wg.Go(func() { f.followChild(ctx, j, skipOld) })
		}
	}
}

// followChild prints a child's events as its record changes, until it ends or ctx ends.
// A child whose start is recorded may not exist yet: its driver creates it next.
func (f *fleetFollower) followChild(ctx context.Context, j fleet.Job, skipOld bool) {
	st := f.ft.ses.nomadStore()
	cur, err := st.Get(ctx, j.Namespace, j.RestartID)
	for errors.Is(err, store.ErrNotFound) {
		skipOld = false // created after the viewer came: all of it is news
		if !cluster.Sleep(ctx, 250*time.Millisecond) {
			return
		}
		cur, err = st.Get(ctx, j.Namespace, j.RestartID)
	}
	if err != nil {
		return
	}
	if skipOld {
		f.setLast(j.RestartID, cur.LastSeq())
	}
	for {
		f.showChild(j, cur)
		if cur.Status.Terminal() {
			return
		}
		next, err := st.Watch(ctx, j.Namespace, j.RestartID, cur.ModifyIndex)
		if err != nil {
			return
		}
		cur = next
	}
}

// flushChildren prints what the followed children stored after their followers stopped:
// their last events, written as the fleet ended.
func (f *fleetFollower) flushChildren(ctx context.Context) {
	st := f.ft.ses.nomadStore()
	f.mu.Lock()
	jobs := make([]fleet.Job, 0, len(f.jobs))
	for _, j := range f.jobs {
		jobs = append(jobs, j)
	}
	f.mu.Unlock()
	for _, j := range jobs {
		if cur, err := st.Get(ctx, j.Namespace, j.RestartID); err == nil {
			f.showChild(j, cur)
		}
	}
}

// showChild prints the child's events not shown yet.
func (f *fleetFollower) showChild(j fleet.Job, cur *restart.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := f.last[j.RestartID]
	for _, ev := range cur.EventsAfter(last) {
		f.a.printFleetEvent(f.p, fleetrun.Event{Fleet: f.ft.rec.ID, Namespace: j.Namespace, JobID: j.JobID, RestartID: j.RestartID, Event: ev}, f.across, true)
		last = ev.Seq
	}
	f.last[j.RestartID] = last
}

func (f *fleetFollower) setLast(id string, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last[id] = seq
}

// stoppedFollowingFleet tells a viewer leaving a fleet what becomes of it.
func (a *app) stoppedFollowingFleet(ctx context.Context, ft *fleetTarget, rec *fleet.Record) {
	id := shortID(rec.ID, false)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	holder, err := ft.ses.fleetStore().LeaseHolder(pctx, rec.Namespace, rec.ID)
	switch {
	case err == nil && holder == "":
		fmt.Fprintf(a.stderr, "Stopped following fleet %s; no process drives it now (status: %s): continue it with `nomad-restart resume %s`\n", id, rec.Status, id)
	case err == nil:
		fmt.Fprintf(a.stderr, "Stopped following fleet %s; it goes on without this viewer (status: %s). Follow it again with `nomad-restart attach %s`\n", id, rec.Status, id)
	default:
		fmt.Fprintf(a.stderr, "Stopped following fleet %s (status: %s). Follow it again with `nomad-restart attach %s`, or continue it with `nomad-restart resume %s` if no process drives it\n", id, rec.Status, id, id)
	}
}
