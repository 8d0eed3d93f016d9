package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// attachCommand is `nomad-restart attach`.
type attachCommand struct{}

func (attachCommand) Run(ctx context.Context, a *app, args []string) error {
	var o idOptions
	var jsonOut bool
	rest, err := a.parseIDFlags("attach", &o, args, func(fs *flag.FlagSet) { fs.BoolVar(&jsonOut, "json", false, "") })
	if err != nil {
		return err
	}
	s, err := a.locate(ctx, "attach", &o, rest)
	if err != nil {
		return err
	}
	return s.attach(ctx, a, a.printer(o.verbose, jsonOut))
}

// Help is `nomad-restart attach -help`.
func (attachCommand) Help() string {
	return `Usage: nomad-restart attach [options] <id>

  Follow a restart live, with the same output as "run". Exits 0 when the
  restart succeeded, 1 otherwise. Ctrl-C stops following; the restart goes
  on. On a terminal, questions the restart waits on are asked here. A
  fleet's ID follows the fleet and its running restarts until it ends.

  -json    Print one JSON event per line, then the final record.
` + idOptionsHelp
}

func (attachCommand) Synopsis() string { return "Follow a restart's progress live" }

// follow shows a restart from its record as it changes (store.Watch), with the same output
// as `run`, until it ends or ctx ends (which stops the viewer only). It exits 0 only when
// the restart succeeded. skipOld skips the events the caller has already shown. When free
// (may be nil) closes, follow returns errLeaseFree so that the caller may take over.
func (a *app) follow(ctx context.Context, p *output.Printer, t *restartSubject, skipOld bool, free <-chan struct{}) error {
	rec, verbose := t.rec, p.Verbose
	v := a.newView(p, t.ses.engine(t.st), t.st, rec)
	v.hinted = free != nil // a resume waiting to take over: "no process drives it" is not so
	if !skipOld {
		v.lastSeq = 0
		id := output.ShortID(rec.ID, verbose)
		if !p.JSON {
			p.Header(a.now(), fmt.Sprintf("Attached to restart %s of job %q (status: %s, state: %s)", id, rec.JobID, rec.Status, t.st.Kind()))
		}
	}
	a.showRecord(ctx, v, rec)

	recs := make(chan *restart.Record)
	errs := make(chan error, 1)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		cur := rec
		for !cur.Status.Terminal() {
			next, err := t.st.Watch(watchCtx, cur.Namespace, cur.ID, cur.ModifyIndex)
			if err != nil {
				errs <- err
				return
			}
			select {
			case recs <- next:
			case <-watchCtx.Done():
				return
			}
			cur = next
		}
	}()

	var lines <-chan string
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for !rec.Status.Terminal() {
		lines = nil
		if v.asking != nil {
			lines = a.inputLines()
		}
		select {
		case <-ctx.Done():
			p.ClearProgress()
			a.stoppedFollowing(ctx, &restartSubject{ses: t.ses, st: t.st, rec: rec}, verbose)
			return &exitError{code: 1}
		case <-free:
			p.ClearProgress()
			return errLeaseFree
		case err := <-errs:
			p.ClearProgress()
			return fmt.Errorf("following restart %s: %s; try `nomad-restart attach %s` again", output.ShortID(rec.ID, verbose), output.OneLine(err.Error()), output.ShortID(rec.ID, verbose))
		case next := <-recs:
			rec = next
			a.showRecord(ctx, v, rec)
		case text, ok := <-lines:
			v.line(ctx, text, ok)
		case <-ticker.C:
			if v.asking == nil {
				p.SetProgress(rec.Progress(a.now()).String())
			}
		}
	}
	p.ClearProgress()
	code := 1
	if rec.Status == restart.StatusSucceeded && len(failedAllocs(rec)) == 0 {
		code = 0
	}
	return a.report(p, rec, verbose, code)
}

// showRecord prints the record's new events, its open question, and the progress line.
func (a *app) showRecord(ctx context.Context, v *view, rec *restart.Record) {
	v.rec = rec
	v.tr = newTracker(rec)
	for _, ev := range rec.EventsAfter(v.lastSeq) {
		if ev.Type == restart.EventQuestion {
			// An open question is shown by v.question below, as a prompt where possible.
			v.lastSeq = ev.Seq
			if v.p.JSON || rec.Status != restart.StatusWaiting {
				v.p.Event(ev)
			}
			continue
		}
		v.handleEvent(ctx, ev)
	}
	if v.asking != nil && (rec.Status != restart.StatusWaiting || rec.Question == nil || rec.Question.ID != v.asking.ID) {
		// Answered elsewhere.
		fmt.Fprintln(v.a.stdout)
		v.asking = nil
	}
	if rec.Status == restart.StatusWaiting {
		v.question(ctx, rec)
	}
	if rec.Status == restart.StatusPending && rec.Driver == "" && !v.p.JSON && !v.hinted {
		v.hinted = true
		id := output.ShortID(rec.ID, v.p.Verbose)
		v.p.Detail(a.now(), fmt.Sprintf("No process drives this restart; continue it with `nomad-restart resume %s`", id))
	}
	if v.asking == nil {
		v.p.SetProgress(rec.Progress(a.now()).String())
	}
}

// fleetFollower shows a fleet's events and its running children's as they are stored.
type fleetFollower struct {
	a        *app
	p        *output.Printer
	fs       *fleetSubject
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
func (a *app) followFleet(ctx context.Context, p *output.Printer, fs *fleetSubject, skipOld bool, free <-chan struct{}) error {
	rec := fs.rec
	f := &fleetFollower{a: a, p: p, fs: fs, across: rec.Selection.Namespace == "*", last: map[string]uint64{}, jobs: map[string]fleet.Job{},
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
			p.ClearProgress()
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
		next, err := f.fs.ses.fleetStore().Watch(wctx, rec.Namespace, rec.ID, rec.ModifyIndex)
		done <- result{next, err}
	}()
	id := output.ShortID(rec.ID, f.p.Verbose)
	tick := time.NewTicker(time.Second) // the progress line's elapsed time moves on
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			f.drawProgress(rec)
		case <-ctx.Done():
			f.p.ClearProgress()
			f.a.stoppedFollowing(ctx, &fleetSubject{ses: f.fs.ses, rec: rec}, f.p.Verbose)
			return nil, &exitError{code: 1}
		case <-free:
			f.p.ClearProgress()
			return nil, errLeaseFree
		case r := <-done:
			if r.err != nil {
				f.p.ClearProgress()
				if ctx.Err() != nil {
					f.a.stoppedFollowing(ctx, &fleetSubject{ses: f.fs.ses, rec: rec}, f.p.Verbose)
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
	if f.p.ShowsProgress() && !rec.Status.Terminal() {
		f.p.SetProgress(f.progress.line(f.a.now()))
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
	st := f.fs.ses.nomadStore()
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
	st := f.fs.ses.nomadStore()
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
		f.a.printFleetEvent(f.p, fleetrun.Event{Fleet: f.fs.rec.ID, Namespace: j.Namespace, JobID: j.JobID, RestartID: j.RestartID, Event: ev}, f.across, true)
		last = ev.Seq
	}
	f.last[j.RestartID] = last
}

func (f *fleetFollower) setLast(id string, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last[id] = seq
}
