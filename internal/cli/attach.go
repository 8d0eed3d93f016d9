package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func (a *app) cmdAttach(ctx context.Context, args []string) error {
	var o idOptions
	var jsonOut bool
	rest, err := a.parseIDFlags("attach", &o, args, func(fs *flag.FlagSet) { fs.BoolVar(&jsonOut, "json", false, "") })
	if err != nil {
		return err
	}
	t, err := a.locate(ctx, "attach", &o, rest)
	if err != nil {
		return err
	}
	p := a.printer(o.verbose, jsonOut)
	if t.fleet != nil {
		return a.attachFleet(ctx, p, t.fleet)
	}
	if !jsonOut && !t.rec.Status.Terminal() && t.rec.Driver != "" && a.driverOf(ctx, t.st, t.rec) == leaseFree {
		// The record names a driver that has let go or died: say so, or the viewer waits
		// for a restart that does not move.
		id := shortID(t.rec.ID, o.verbose)
		p.header(a.now(), fmt.Sprintf("Restart %s was driven by %s, but no process drives it now; continue it with `nomad-restart resume %s`", id, t.rec.Driver, id))
	}
	return a.follow(ctx, p, t, o.verbose, false, nil)
}

// follow shows a restart from its record as it changes (store.Watch), with the same output
// as `run`, until it ends or ctx ends (which stops the viewer only). It exits 0 only when
// the restart succeeded. skipOld skips the events the caller has already shown. When free
// (may be nil) closes, follow returns errLeaseFree so that the caller may take over.
func (a *app) follow(ctx context.Context, p *printer, t *target, verbose, skipOld bool, free <-chan struct{}) error {
	rec := t.rec
	v := a.newView(p, t.ses.engine(t.st), t.st, rec)
	v.hinted = free != nil // a resume waiting to take over: "no process drives it" is not so
	if !skipOld {
		v.lastSeq = 0
		id := shortID(rec.ID, verbose)
		if !p.json {
			p.header(a.now(), fmt.Sprintf("Attached to restart %s of job %q (status: %s, state: %s)", id, rec.JobID, rec.Status, t.st.Kind()))
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
			p.clearProgress()
			a.stoppedFollowing(ctx, t.st, rec, verbose)
			return &exitError{code: 1}
		case <-free:
			p.clearProgress()
			return errLeaseFree
		case err := <-errs:
			p.clearProgress()
			return fmt.Errorf("following restart %s: %s; try `nomad-restart attach %s` again", shortID(rec.ID, verbose), oneLine(err.Error()), shortID(rec.ID, verbose))
		case next := <-recs:
			rec = next
			a.showRecord(ctx, v, rec)
		case text, ok := <-lines:
			v.line(ctx, text, ok)
		case <-ticker.C:
			if v.asking == nil {
				p.setProgress(rec.Progress(a.now()).String())
			}
		}
	}
	p.clearProgress()
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
			if v.p.json || rec.Status != restart.StatusWaiting {
				v.p.event(ev)
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
	if rec.Status == restart.StatusPending && rec.Driver == "" && !v.p.json && !v.hinted {
		v.hinted = true
		id := shortID(rec.ID, v.p.verbose)
		v.p.detail(a.now(), fmt.Sprintf("No process drives this restart; continue it with `nomad-restart resume %s`", id))
	}
	if v.asking == nil {
		v.p.setProgress(rec.Progress(a.now()).String())
	}
}
