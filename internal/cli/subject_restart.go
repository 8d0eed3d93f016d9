package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// restartSubject is a restart found by ID, with the session and store it lives in.
type restartSubject struct {
	ses session
	st  store.Store
	rec *restart.Record
}

func (s *restartSubject) head() steer.Head { return steer.RestartHead(s.rec) }

func (s *restartSubject) name(verbose bool) string {
	return "restart " + output.ShortID(s.rec.ID, verbose)
}

func (s *restartSubject) driverName() string { return s.rec.Driver }

func (s *restartSubject) refresh(ctx context.Context) {
	if cur, err := s.st.Get(ctx, s.rec.Namespace, s.rec.ID); err == nil {
		s.rec = cur
	}
}

func (s *restartSubject) title(verbose bool) string {
	return fmt.Sprintf("restart %s of job %q", output.ShortID(s.rec.ID, verbose), s.rec.JobID)
}

func (s *restartSubject) runAgain() string { return "nomad-restart run " + s.rec.JobID }

func (s *restartSubject) storeErrorText(err error) string { return output.OneLine(errorText(err)) }

func (s *restartSubject) steerer() steer.Steerer {
	return steer.Adapt[*restart.Record, *restart.Record](s.ses.engine(s.st))
}

func (s *restartSubject) lease() leaseOf { return leaseIn(s.st, s.rec.Namespace, s.rec.ID) }

func (s *restartSubject) steered(cmd string, h steer.Head, verbose bool) string {
	id := output.ShortID(h.ID, verbose)
	what := "Cancel requested: no more allocations of restart " + id + " will be restarted"
	if cmd == "pause" {
		what = fmt.Sprintf("Pause requested: the batch in flight finishes, then the restart holds; continue it with `nomad-restart resume %s`", id)
	}
	return fmt.Sprintf("Restart %s of job %q: %s (status: %s)", id, s.rec.JobID, what, h.Status)
}

// noteDriver follows a pause or cancel that was only recorded: its driver applies it when
// it next acts, which a dead driver does not until its lease expires.
func (s *restartSubject) noteDriver(ctx context.Context, a *app, cmd string, verbose bool) {
	l := s.lease()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	free, err := l.free(pctx, a.by())
	id := output.ShortID(s.rec.ID, verbose)
	who, _ := l.holder(pctx)
	if who == "" {
		who = "another process"
	}
	switch {
	case err != nil:
		return
	case !free:
		fmt.Fprintf(a.stdout, "    The %s is recorded; it takes effect when its driver, %s, acts, or once its lease expires%s and another driver takes it\n", cmd, who, l.expiry())
	case cmd == "pause":
		fmt.Fprintf(a.stdout, "    No process drives restart %s now: it stays paused until `nomad-restart resume %s`\n", id, id)
	}
}

func (s *restartSubject) resume(ctx context.Context, a *app, p *output.Printer, detach bool) error {
	eng := s.ses.engine(s.st)
	rec, err := eng.Resume(ctx, s.rec.Namespace, s.rec.ID, a.by())
	if err != nil {
		return steerError(s, "resume", err, p.Verbose)
	}
	id := output.ShortID(rec.ID, p.Verbose)
	if detach {
		reportSetToRun(a, p, rec,
			fmt.Sprintf("Restart %s of job %q set to run (status: %s); a driver continues it: `nomad-restart resume %s` without -detach, or the agent", id, rec.JobID, rec.Status, id))
		return nil
	}
	if !p.JSON {
		p.Header(a.now(), fmt.Sprintf("Resuming restart %s of job %q (state: %s)", id, rec.JobID, s.st.Kind()))
	}
	return a.driveOrTakeOver(ctx, p, eng, &restartSubject{ses: s.ses, st: s.st, rec: rec})
}

func (s *restartSubject) show(ctx context.Context, a *app, verbose bool) {
	a.printRecord(s.rec, s.st.Kind(), verbose, s.lease().state(ctx, a.by()))
}

func (s *restartSubject) entry() any { return newRestartEntry(s.rec) }

func (s *restartSubject) attach(ctx context.Context, a *app, p *output.Printer) error {
	rec := s.rec
	if !p.JSON && !rec.Status.Terminal() && rec.Driver != "" && s.lease().state(ctx, a.by()) == leaseFree {
		// The record names a driver that has let go or died: say so, or the viewer waits
		// for a restart that does not move.
		id := output.ShortID(rec.ID, p.Verbose)
		p.Header(a.now(), fmt.Sprintf("Restart %s was driven by %s, but no process drives it now; continue it with `nomad-restart resume %s`", id, rec.Driver, id))
	}
	return a.follow(ctx, p, s, false, nil)
}
