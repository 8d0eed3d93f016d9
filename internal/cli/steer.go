package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// The steering commands (pause, cancel, answer, resume) of a restart or a fleet: one write
// of the record's Control through its steerer (steer.Steerer), then what the kind does
// with it (subject.go).

// pauseCommand is `nomad-restart pause`.
type pauseCommand struct{}

func (pauseCommand) Run(ctx context.Context, a *app, args []string) error {
	return a.steer(ctx, "pause", args, steer.Steerer.Pause)
}

// Help is `nomad-restart pause -help`.
func (pauseCommand) Help() string {
	return `Usage: nomad-restart pause [options] <id>

  Hold a restart: the batch in flight finishes, then no new batch starts
  until "nomad-restart resume <id>". A fleet's ID holds the fleet: no new
  job starts, and its running restarts hold after their batch.
` + idOptionsHelp
}

func (pauseCommand) Synopsis() string { return "Hold a restart after the batch in flight" }

// cancelCommand is `nomad-restart cancel`.
type cancelCommand struct{}

func (cancelCommand) Run(ctx context.Context, a *app, args []string) error {
	return a.steer(ctx, "cancel", args, steer.Steerer.Cancel)
}

// Help is `nomad-restart cancel -help`.
func (cancelCommand) Help() string {
	return `Usage: nomad-restart cancel [options] <id>

  Cancel a restart: requests in flight finish and are recorded, no more
  allocations are restarted. A fleet's ID cancels the fleet: no new job
  starts, and its running restarts are canceled.
` + idOptionsHelp
}

func (cancelCommand) Synopsis() string { return "Stop a restart: no more allocations are restarted" }

// steer runs pause or cancel: one write of the record's Control (a cancel of a record no
// process drives also ends it here).
func (a *app) steer(ctx context.Context, cmd string, args []string, do func(steer.Steerer, context.Context, string, string, string) (steer.Head, error)) error {
	var o idOptions
	rest, err := a.parseIDFlags(cmd, &o, args, nil)
	if err != nil {
		return err
	}
	s, err := a.locate(ctx, cmd, &o, rest)
	if err != nil {
		return err
	}
	before := s.head()
	if before.Status.Terminal() {
		return endedError(s, cmd, o.verbose)
	}
	h, err := do(s.steerer(), ctx, before.Namespace, before.ID, a.by())
	if err != nil {
		return steerError(s, cmd, err, o.verbose)
	}
	p := a.printer(o.verbose, false)
	p.Header(a.now(), s.steered(cmd, h, o.verbose))
	// What this command itself did on the way (a cancel scaling a surge back): its events.
	for _, ev := range h.Events {
		if ev.Seq > lastSeq(before.Events) && ev.Type == restart.EventSurge {
			p.Event(ev)
		}
	}
	if !h.Status.Terminal() {
		s.noteDriver(ctx, a, cmd, o.verbose)
	}
	return nil
}

func lastSeq(events []restart.Event) uint64 {
	if n := len(events); n > 0 {
		return events[n-1].Seq
	}
	return 0
}

// answerCommand is `nomad-restart answer`.
type answerCommand struct{}

func (answerCommand) Run(ctx context.Context, a *app, args []string) error {
	var o idOptions
	rest, err := a.parseIDFlags("answer", &o, args, nil)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return usageErrorf("answer takes a restart ID and an answer, as in `nomad-restart answer <id> yes|no|<duration>`")
	}
	text := strings.TrimSpace(rest[1])
	s, err := a.locate(ctx, "answer", &o, rest[:1])
	if err != nil {
		return err
	}
	h := s.head()
	id := output.ShortID(h.ID, o.verbose)
	if h.Status.Terminal() {
		return endedError(s, "answer", o.verbose)
	}
	if h.Status == restart.StatusWaiting && h.Question != nil {
		if _, err := restart.ParseAnswer(h.Question, text); err != nil {
			return usageErrorf("Invalid answer %q to %q: answer %s", text, output.OneLine(h.Question.Text), answerChoices(h.Question))
		}
	}
	answered, err := s.steerer().Answer(ctx, h.Namespace, h.ID, text, a.by())
	switch {
	case errors.Is(err, steer.ErrNoQuestion) && h.Kind == steer.KindFleet:
		return usageErrorf("fleet %s is not waiting for an answer, nor is any of its running restarts (status: %s); there is nothing to answer; see `nomad-restart status %s`", id, h.Status, id)
	case errors.Is(err, steer.ErrNoQuestion):
		return usageErrorf("restart %s is not waiting for an answer (status: %s); there is nothing to answer; see `nomad-restart status %s`", id, h.Status, id)
	case err != nil:
		return fmt.Errorf("answering %s %s: %s", h.Kind, id, output.OneLine(errorText(err)))
	}
	p := a.printer(o.verbose, false)
	if h.Kind == steer.KindFleet {
		p.Header(a.now(), answeredFleet(text, id, answered.Restarts, o.verbose))
		return nil
	}
	p.Header(a.now(), fmt.Sprintf("Answered %q to restart %s of job %q (status: %s)", text, id, h.JobID, h.Status))
	return nil
}

// Help is `nomad-restart answer -help`.
func (answerCommand) Help() string {
	return `Usage: nomad-restart answer [options] <id> yes|no|<duration>

  Answer the question a restart waits on ("-batch-wait ask" or
  "-on-error ask"): yes proceeds, no stops the restart, and a duration
  (where the question offers one) proceeds and becomes the new wait
  between batches. A fleet's ID answers the fleet's own question (its
  -max-failed-jobs spent: yes starts the remaining jobs, no ends it), else
  the question each of its running restarts waits on.
` + idOptionsHelp
}

func (answerCommand) Synopsis() string { return "Answer the question a restart waits on" }

// answerChoices names the answers a question accepts.
func answerChoices(q *restart.Question) string {
	if strings.Contains(q.Options, "<wait duration>") {
		return "yes, no, or a wait duration like 30s"
	}
	return "yes or no"
}

// resumeCommand is `nomad-restart resume`.
type resumeCommand struct{}

func (resumeCommand) Run(ctx context.Context, a *app, args []string) error {
	var o idOptions
	var detach, jsonOut bool
	rest, err := a.parseIDFlags("resume", &o, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&detach, "detach", false, "")
		fs.BoolVar(&jsonOut, "json", false, "")
	})
	if err != nil {
		return err
	}
	s, err := a.locate(ctx, "resume", &o, rest)
	if err != nil {
		return err
	}
	if s.head().Status.Terminal() {
		return endedError(s, "resume", o.verbose)
	}
	return s.resume(ctx, a, a.printer(o.verbose, jsonOut), detach)
}

// Help is `nomad-restart resume -help`.
func (resumeCommand) Help() string {
	return `Usage: nomad-restart resume [options] <id>

  Continue a paused, detached or abandoned restart. Unless another process
  drives it, this process becomes its driver, with live output (Ctrl-C
  detaches again). Allocations already restarted are not restarted again.
  A fleet's ID resumes the fleet and the restarts it paused, and drives
  them here; a job already restarted by the fleet is not restarted again.

  -detach  Only set the restart to run; do not drive it here.
  -json    Print one JSON event per line, then the final record.
` + idOptionsHelp
}

func (resumeCommand) Synopsis() string { return "Continue a paused or detached restart" }

// driveOrTakeOver drives the restart here; when another process holds its lease, it
// follows the restart and takes over as soon as the lease is free (its driver let go, or
// died and its lease expired), so that resuming an orphan never waits forever.
func (a *app) driveOrTakeOver(ctx context.Context, p *output.Printer, eng restarter, s *restartSubject) error {
	driveHere := func(ctx context.Context, sink func(restart.Event)) (*restart.Record, error) {
		return eng.Drive(ctx, s.rec.Namespace, s.rec.ID, sink)
	}
	return takeOver(ctx, a, p, s, func() error { return a.drive(ctx, p, eng, s.st, s.rec, p.Verbose, driveHere) },
		func() { s.refresh(ctx) },
		func(ctx context.Context, free <-chan struct{}) error { return a.follow(ctx, p, s, true, free) })
}

// driveOrTakeOverFleet is driveOrTakeOver for a fleet, driven here with its children.
func (a *app) driveOrTakeOverFleet(ctx context.Context, p *output.Printer, drv *fleetrun.Driver, s *fleetSubject) error {
	return takeOver(ctx, a, p, s, func() error {
		ended, err := a.runFleetHere(ctx, p, s.ses.fleetStore(), drv, s.rec, nil)
		if errors.Is(err, store.ErrLeaseHeld) {
			return err
		}
		return a.fleetFinish(ctx, p, s.rec.ID, ended, err)
	}, func() { s.refresh(ctx) },
		func(ctx context.Context, free <-chan struct{}) error { return a.followFleet(ctx, p, s, true, free) })
}

// takeOver drives s here with drive; while another process holds its lease, it follows s
// with follow (refreshed first) until the lease is free, says so, and drives it again.
func takeOver(ctx context.Context, a *app, p *output.Printer, s subject, drive func() error, refresh func(),
	follow func(ctx context.Context, free <-chan struct{}) error) error {
	said := false
	for {
		err := drive()
		if !errors.Is(err, store.ErrLeaseHeld) {
			return err
		}
		refresh()
		l := s.lease()
		what := capitalized(s.name(p.Verbose))
		if !said && !p.JSON {
			said = true
			who, _ := l.holder(ctx)
			if who == "" {
				who = s.driverName()
			}
			p.Header(a.now(), l.waitingForDriver(what, who))
		}
		wctx, stop := context.WithCancel(ctx)
		err = follow(wctx, l.watch(wctx, a.by()))
		stop()
		if !errors.Is(err, errLeaseFree) {
			return err
		}
		refresh()
		if !p.JSON {
			p.Header(a.now(), fmt.Sprintf("%s: its lease is free; taking over", what))
		}
	}
}

// capitalized is s with its first letter upper-case: a name at the start of a sentence.
func capitalized(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// errLeaseFree ends a follow when the lease of the record it follows became free: its
// driver let go or died, and the caller (resume) takes over.
var errLeaseFree = errors.New("the lease is free")

// probeBackoff is the pause between lease probes: a few seconds, doubling up to the lock's
// TTL (no sooner can a silent driver's lease expire), and never above the first pause where
// the lease frees at once.
func probeBackoff(ttl time.Duration, attempt int) time.Duration {
	first := 2 * time.Second
	if ttl > 0 && ttl/4 < first {
		first = max(ttl/4, 10*time.Millisecond) // a sped-up simulated cluster
	}
	limit := max(ttl, first)
	d := first
	for range attempt {
		d *= 2
		if d >= limit {
			return limit
		}
	}
	return d
}

// untilLeaseFree calls free, paced by probeBackoff, until it answers true, then closes the
// returned channel.
func untilLeaseFree(ctx context.Context, ttl time.Duration, free func() (bool, error)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for attempt := 0; ; attempt++ {
			t := time.NewTimer(probeBackoff(ttl, attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if ok, err := free(); err == nil && ok {
				close(done)
				return
			}
		}
	}()
	return done
}

// leaseHeldError says that Drive found the lease taken; it matches store.ErrLeaseHeld.
func leaseHeldError(id string, verbose bool) error {
	return fmt.Errorf("restart %s is driven by another process; follow it with `nomad-restart attach %s`: %w", output.ShortID(id, verbose), output.ShortID(id, verbose), store.ErrLeaseHeld)
}
