package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// printer returns a printer on stdout for this invocation.
func (a *app) printer(verbose, jsonOut bool) *output.Printer {
	return &output.Printer{Out: a.stdout, TTY: a.interactive && !jsonOut, Width: a.width, Verbose: verbose, JSON: jsonOut}
}

// eventQueue is an unbounded queue between the engine's sink, which must never block (the
// driver calls it between persisted steps), and the view, which may wait on a prompt.
type eventQueue struct {
	mu     sync.Mutex
	items  []restart.Event
	closed bool
	signal chan struct{}
}

func newEventQueue() *eventQueue { return &eventQueue{signal: make(chan struct{}, 1)} }

func (q *eventQueue) push(ev restart.Event) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take returns the queued events and whether the queue is closed: the producer closes it
// after its last push, so a take that sees it closed has taken everything.
func (q *eventQueue) take() ([]restart.Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items, q.closed
}

// view shows a restart live: events, the progress line, and questions.
type view struct {
	a       *app
	p       *output.Printer
	eng     restarter
	st      store.Store
	rec     *restart.Record // latest known record (the plan, or what Watch returned)
	tr      *tracker
	lastSeq uint64
	// asked is the ID of the last question shown; asking is true while the prompt for it
	// waits for a line on this terminal.
	asked  string
	asking *restart.Question
	// answered is set by the view itself so that its own answer does not read as one from
	// elsewhere.
	answeredHere bool
	// hinted is set once the view said that nobody drives the restart.
	hinted bool
}

func (a *app) newView(p *output.Printer, eng restarter, st store.Store, rec *restart.Record) *view {
	return &view{a: a, p: p, eng: eng, st: st, rec: rec, tr: newTracker(rec), lastSeq: rec.LastSeq()}
}

// prompting says whether questions are asked on this terminal.
func (v *view) prompting() bool { return v.a.interactive && !v.p.JSON }

// handleEvent prints one event and reacts to questions and answers.
func (v *view) handleEvent(ctx context.Context, ev restart.Event) {
	if ev.Seq != 0 && ev.Seq <= v.lastSeq {
		return
	}
	if ev.Seq > v.lastSeq {
		v.lastSeq = ev.Seq
	}
	v.tr.apply(ev)
	switch ev.Type {
	case restart.EventQuestion:
		if v.p.JSON {
			v.p.Event(ev) // scripts answer with `nomad-restart answer`
			return
		}
		// The prompt (or, without a terminal, the question and how to answer it) is the
		// question's line.
		if !v.question(ctx, nil) {
			v.p.Event(ev)
		}
		return
	case restart.EventAnswer:
		if v.asking != nil && !v.answeredHere {
			// Answered from another terminal: drop our prompt.
			v.p.Plain("")
			v.asking = nil
		}
		v.answeredHere = false
	}
	v.p.Event(ev)
	if v.p.ShowsProgress() {
		v.p.SetProgress(v.tr.line(v.a.now()))
	}
}

// question shows the restart's open question: a prompt on a terminal, or the question and
// how to answer it. rec is the latest record when known; otherwise it is read. It reports
// whether it printed the question.
func (v *view) question(ctx context.Context, rec *restart.Record) bool {
	if rec == nil {
		r, err := v.st.Get(ctx, v.rec.Namespace, v.rec.ID)
		if err != nil {
			v.p.Detail(v.a.now(), fmt.Sprintf("cannot read the question of restart %s: %v", v.rec.ID, err))
			return false
		}
		rec = r
	}
	q := rec.Question
	if rec.Status != restart.StatusWaiting || q == nil || q.ID == v.asked {
		return false
	}
	v.asked = q.ID
	if v.p.JSON {
		return false
	}
	if !v.prompting() {
		v.p.Header(q.Asked, q.Prompt())
		id := output.ShortID(rec.ID, v.p.Verbose)
		v.p.Detail(v.a.now(), fmt.Sprintf("No terminal to ask on: answer with `nomad-restart answer %s yes|no|<duration>`", id))
		return true
	}
	v.asking = q
	v.prompt()
	return true
}

func (v *view) prompt() {
	v.p.ClearProgress()
	fmt.Fprintf(v.a.stdout, "==> %s: %s ", output.FormatTime(v.a.now()), output.Indent(v.asking.Prompt(), output.TimestampPrefixLen))
}

// line handles a line typed while a question is open (ok false: end of input).
func (v *view) line(ctx context.Context, text string, ok bool) {
	q := v.asking
	if q == nil {
		return
	}
	if !ok {
		// End of input: as Nomad's prompt on a failed read, take "no".
		text = "n"
		fmt.Fprintln(v.a.stdout)
	}
	text = restart.AtPrompt(q, text)
	if _, err := restart.ParseAnswer(q, text); err != nil {
		v.p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + fmt.Sprintf("Invalid answer %q", strings.TrimSpace(text)))
		v.prompt()
		return
	}
	v.asking = nil
	v.answeredHere = true
	if _, err := v.eng.Answer(ctx, v.rec.Namespace, v.rec.ID, text, v.a.by()); err != nil {
		v.answeredHere = false
		v.p.Header(v.a.now(), fmt.Sprintf("Answer not taken: %s", output.OneLine(err.Error())))
	}
}

// drive runs a restart in this process (driveHere) with live output until it ends, or until
// ctx ends (Ctrl-C or SIGTERM: detach, leaving the record consistent for `resume`).
func (a *app) drive(ctx context.Context, p *output.Printer, eng restarter, st store.Store, rec *restart.Record, verbose bool, driveHere driveFunc) error {
	v := a.newView(p, eng, st, rec)
	q := newEventQueue()
	driveCtx, stop := context.WithCancel(ctx)
	defer stop()

	type result struct {
		rec *restart.Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := driveHere(driveCtx, q.push)
		q.close()
		done <- result{r, err}
	}()

	var lines <-chan string
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		if v.asking != nil && lines == nil {
			lines = a.inputLines()
		}
		if v.asking == nil {
			lines = nil
		}
		select {
		case <-q.signal:
			evs, drained := q.take()
			for _, ev := range evs {
				v.handleEvent(ctx, ev)
			}
			if drained {
				res := <-done
				return a.finish(ctx, p, v, res.rec, res.err, verbose)
			}
		case text, ok := <-lines:
			if !ok {
				lines = nil
			}
			v.line(ctx, text, ok)
		case <-ticker.C:
			if v.asking == nil && p.ShowsProgress() {
				p.SetProgress(v.tr.line(a.now()))
			}
		}
	}
}

// finish prints the end of a driven restart and returns its exit status.
func (a *app) finish(ctx context.Context, p *output.Printer, v *view, rec *restart.Record, err error, verbose bool) error {
	p.ClearProgress()
	id := v.rec.ID
	if err != nil {
		switch {
		case ctx.Err() != nil:
			if p.JSON && rec != nil {
				p.JSONLine(rec)
			}
			fmt.Fprintf(a.stderr, "Detached from restart %s; it is not running now. Resume it with `nomad-restart resume %s`\n", output.ShortID(id, verbose), output.ShortID(id, verbose))
			return &exitError{code: 1}
		case errors.Is(err, store.ErrLeaseHeld):
			return leaseHeldError(id, verbose)
		}
		return fmt.Errorf("driving restart %s: %s; resume it with `nomad-restart resume %s`", output.ShortID(id, verbose), output.OneLine(errorText(err)), output.ShortID(id, verbose))
	}
	return a.report(p, rec, verbose, exitForRun(rec))
}

// report prints a finished restart's outcome and returns the exit status code.
func (a *app) report(p *output.Printer, rec *restart.Record, verbose bool, code int) error {
	if p.JSON {
		p.JSONLine(rec)
	} else {
		failed := failedAllocs(rec)
		switch {
		case rec.Status == restart.StatusSucceeded && len(failed) == 0:
			p.Plain("\nJob restarted successfully!")
		case len(failed) > 0:
			fmt.Fprintf(a.stderr, "\n%s occurred while restarting job:\n", output.Plural(len(failed), "error", "errors"))
			for _, f := range failed {
				fmt.Fprintf(a.stderr, "* %s\n", output.Indent(p.IDs(f.Error), 2))
			}
			if hint := aclHint(rec, failed); hint != "" {
				fmt.Fprintf(a.stderr, "\n%s\n", hint)
			}
		case rec.Status == restart.StatusFailed && rec.Reason != "":
			fmt.Fprintf(a.stderr, "\n%s\n", p.IDs(rec.Reason))
		}
	}
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

// exitForRun is the exit code of `run` and `resume`: 0 when every allocation was restarted,
// and, as Nomad's command, when an operator answered "no" at a question before any error
// (the restart is then canceled); 1 otherwise: failures (even those an operator chose to
// ignore, as in Nomad), and a cancel from `nomad-restart cancel`.
func exitForRun(rec *restart.Record) int {
	if rec == nil || len(failedAllocs(rec)) > 0 {
		return 1
	}
	switch rec.Status {
	case restart.StatusSucceeded:
		return 0
	case restart.StatusCanceled:
		if rec.Control.Intent != restart.IntentCancel {
			return 0
		}
	}
	return 1
}

func failedAllocs(rec *restart.Record) []restart.AllocProgress {
	var out []restart.AllocProgress
	for _, ap := range rec.Allocs {
		if ap.State == restart.AllocFailed {
			out = append(out, ap)
		}
	}
	return out
}
