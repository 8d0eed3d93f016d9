package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// target is a restart found by ID, with the session and store it lives in; or, when the
// ID names a fleet, that fleet (fleet set, st and rec nil).
type target struct {
	ses   session
	st    store.Store
	rec   *restart.Record
	fleet *fleetTarget
}

// locate parses the ID command's flags and finds the restart.
func (a *app) locate(ctx context.Context, cmd string, o *idOptions, fsArgs []string) (*target, error) {
	id, err := oneID(cmd, fsArgs)
	if err != nil {
		return nil, err
	}
	ses, err := a.openForIDs(o)
	if err != nil {
		return nil, err
	}
	stores, err := a.stores(ctx, ses, o.state)
	if err != nil {
		return nil, err
	}
	st, rec, ft, err := a.findAny(ctx, ses, stores, o, id)
	if err != nil {
		return nil, err
	}
	return &target{ses: ses, st: st, rec: rec, fleet: ft}, nil
}

// endedError refuses to steer a restart that has ended.
func endedError(rec *restart.Record, verb string, verbose bool) error {
	return usageErrorf("restart %s of job %q has already ended (%s); there is nothing to %s; start a new one with `nomad-restart run %s`",
		shortID(rec.ID, verbose), rec.JobID, rec.Status, verb, rec.JobID)
}

func (a *app) cmdPause(ctx context.Context, args []string) error {
	return a.steer(ctx, "pause", args, func(t *target, eng restarter, by string) (*restart.Record, error) {
		return eng.Pause(ctx, t.rec.Namespace, t.rec.ID, by)
	}, "Pause requested: the batch in flight finishes, then the restart holds; continue it with `nomad-restart resume %s`")
}

func (a *app) cmdCancel(ctx context.Context, args []string) error {
	return a.steer(ctx, "cancel", args, func(t *target, eng restarter, by string) (*restart.Record, error) {
		return eng.Cancel(ctx, t.rec.Namespace, t.rec.ID, by)
	}, "Cancel requested: no more allocations of restart %s will be restarted")
}

// steer runs pause or cancel: one write of the record's Control.
func (a *app) steer(ctx context.Context, cmd string, args []string, do func(*target, restarter, string) (*restart.Record, error), done string) error {
	var o idOptions
	rest, err := a.parseIDFlags(cmd, &o, args, nil)
	if err != nil {
		return err
	}
	t, err := a.locate(ctx, cmd, &o, rest)
	if err != nil {
		return err
	}
	if t.fleet != nil {
		return a.steerFleet(ctx, cmd, t.fleet, o.verbose)
	}
	if t.rec.Status.Terminal() {
		return endedError(t.rec, cmd, o.verbose)
	}
	rec, err := do(t, t.ses.engine(t.st), a.by())
	if ce := (*steer.CancelingError)(nil); errors.As(err, &ce) {
		return errors.New(errorText(ce))
	}
	if err != nil {
		return fmt.Errorf("%s restart %s: %s", cmd, shortID(t.rec.ID, o.verbose), oneLine(errorText(err)))
	}
	p := a.printer(o.verbose, false)
	id := shortID(rec.ID, o.verbose)
	p.header(a.now(), fmt.Sprintf("Restart %s of job %q: %s (status: %s)", id, rec.JobID, fmt.Sprintf(done, id), rec.Status))
	// What this command itself did on the way (a cancel scaling a surge back): its events.
	for _, ev := range rec.EventsAfter(t.rec.LastSeq()) {
		if ev.Type == restart.EventSurge {
			p.event(ev)
		}
	}
	if !rec.Status.Terminal() {
		a.noteHeldSteer(ctx, t.st, rec, cmd, o.verbose)
	}
	return nil
}

func (a *app) cmdAnswer(ctx context.Context, args []string) error {
	var o idOptions
	rest, err := a.parseIDFlags("answer", &o, args, nil)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return usageErrorf("answer takes a restart ID and an answer, as in `nomad-restart answer <id> yes|no|<duration>`")
	}
	text := strings.TrimSpace(rest[1])
	t, err := a.locate(ctx, "answer", &o, rest[:1])
	if err != nil {
		return err
	}
	if t.fleet != nil {
		return a.answerFleet(ctx, t.fleet, text, o.verbose)
	}
	rec := t.rec
	id := shortID(rec.ID, o.verbose)
	if rec.Status.Terminal() {
		return endedError(rec, "answer", o.verbose)
	}
	if rec.Status != restart.StatusWaiting || rec.Question == nil {
		return usageErrorf("restart %s is not waiting for an answer (status: %s); there is nothing to answer; see `nomad-restart status %s`", id, rec.Status, id)
	}
	if _, err := restart.ParseAnswer(rec.Question, text); err != nil {
		return usageErrorf("Invalid answer %q to %q: answer %s", text, oneLine(rec.Question.Text), answerChoices(rec.Question))
	}
	out, err := t.ses.engine(t.st).Answer(ctx, rec.Namespace, rec.ID, text, a.by())
	if err != nil {
		return fmt.Errorf("answering restart %s: %s", id, oneLine(err.Error()))
	}
	p := a.printer(o.verbose, false)
	p.header(a.now(), fmt.Sprintf("Answered %q to restart %s of job %q (status: %s)", text, id, out.JobID, out.Status))
	return nil
}

// answerChoices names the answers a question accepts.
func answerChoices(q *restart.Question) string {
	if strings.Contains(q.Options, "<wait duration>") {
		return "yes, no, or a wait duration like 30s"
	}
	return "yes or no"
}

func (a *app) cmdResume(ctx context.Context, args []string) error {
	var o idOptions
	var detach, jsonOut bool
	rest, err := a.parseIDFlags("resume", &o, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&detach, "detach", false, "")
		fs.BoolVar(&jsonOut, "json", false, "")
	})
	if err != nil {
		return err
	}
	t, err := a.locate(ctx, "resume", &o, rest)
	if err != nil {
		return err
	}
	if t.fleet != nil {
		return a.resumeFleet(ctx, t.fleet, o.verbose, detach, jsonOut)
	}
	if t.rec.Status.Terminal() {
		return endedError(t.rec, "resume", o.verbose)
	}
	eng := t.ses.engine(t.st)
	rec, err := eng.Resume(ctx, t.rec.Namespace, t.rec.ID, a.by())
	if ce := (*steer.CancelingError)(nil); errors.As(err, &ce) {
		return errors.New(errorText(ce))
	}
	if err != nil {
		return fmt.Errorf("resume restart %s: %s", shortID(t.rec.ID, o.verbose), oneLine(errorText(err)))
	}
	p := a.printer(o.verbose, jsonOut)
	id := shortID(rec.ID, o.verbose)
	if detach {
		if jsonOut {
			p.jsonLine(rec)
		} else {
			p.header(a.now(), fmt.Sprintf("Restart %s of job %q set to run (status: %s); a driver continues it: `nomad-restart resume %s` without -detach, or the agent", id, rec.JobID, rec.Status, id))
		}
		return nil
	}
	if !jsonOut {
		p.header(a.now(), fmt.Sprintf("Resuming restart %s of job %q (state: %s)", id, rec.JobID, t.st.Kind()))
	}
	return a.driveOrTakeOver(ctx, p, eng, t, rec, o.verbose, jsonOut)
}

// leaseHeldError says that Drive found the lease taken; it matches store.ErrLeaseHeld.
func leaseHeldError(id string, verbose bool) error {
	return fmt.Errorf("restart %s is driven by another process; follow it with `nomad-restart attach %s`: %w", shortID(id, verbose), shortID(id, verbose), store.ErrLeaseHeld)
}
