package cli

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// fleetRun is what a drive of a fleet in this process ended with.
type fleetRun struct {
	rec *fleet.Record
	err error
}

// runFleetHere drives the fleet in this process, printing its events and its children's.
// On a terminal (without -json) it also asks the questions they wait on, and sends each
// answer as `nomad-restart answer <fleet-id>` would. lease is the fleet's when this process
// created it with its lease (nil: the drive takes it).
func (a *app) runFleetHere(ctx context.Context, p *output.Printer, fleets store.Fleets, drv *fleetrun.Driver, rec *fleet.Record, lease store.Lease) (*fleet.Record, error) {
	prompting := a.interactive && !p.JSON
	sink := a.fleetSink(p, rec, prompting)
	run := func(sink func(fleetrun.Event)) (*fleet.Record, error) {
		if lease != nil {
			return drv.RunHeld(ctx, rec, lease, sink)
		}
		return drv.Run(ctx, rec.Namespace, rec.ID, sink)
	}
	if !prompting {
		return run(sink)
	}
	fp := &fleetPrompt{a: a, p: p, fleets: fleets, drv: drv, rec: rec, events: make(chan fleetrun.Event, 64),
		progress: newFleetProgress(rec), redraw: make(chan struct{}, 1)}
	done := make(chan fleetRun, 1)
	go func() {
		ended, err := run(fp.wrap(sink))
		done <- fleetRun{ended, err}
	}()
	res := fp.serve(ctx, done)
	return res.rec, res.err
}

// fleetPrompt asks on this terminal, one at a time, the questions of a fleet driven here:
// its own (its failure budget spent) and its restarts'. The prompt is kept below the
// lines the fleet prints meanwhile (the printer's progress line); while nothing is asked,
// that line shows the fleet's progress.
type fleetPrompt struct {
	progress *fleetProgress
	// redraw is told when the fleet's counts changed.
	redraw chan struct{}

	a      *app
	p      *output.Printer
	fleets store.Fleets
	drv    *fleetrun.Driver
	rec    *fleet.Record
	// events receives the questions and answers the fleet's sink saw.
	events  chan fleetrun.Event
	pending []fleetrun.Event
	asking  *fleetrun.Event
}

// wrap passes every event to sink and the questions and answers to the prompt. It never
// blocks the driver: a question beyond the channel's room is still answerable with
// `nomad-restart answer`.
func (fp *fleetPrompt) wrap(sink func(fleetrun.Event)) func(fleetrun.Event) {
	return func(e fleetrun.Event) {
		sink(e)
		if fp.progress.take(e) {
			select {
			case fp.redraw <- struct{}{}:
			default: // a redraw is pending already
			}
		}
		if e.Type != restart.EventQuestion && e.Type != restart.EventAnswer {
			return
		}
		select {
		case fp.events <- e:
		default:
		}
	}
}

// serve asks the questions as they come until the drive ends.
func (fp *fleetPrompt) serve(ctx context.Context, done <-chan fleetRun) fleetRun {
	var lines <-chan string
	tick := time.NewTicker(time.Second) // the elapsed time and the estimate move on
	defer tick.Stop()
	for {
		select {
		case res := <-done:
			fp.p.ClearProgress()
			return res
		case <-fp.redraw:
		case <-tick.C:
		case e := <-fp.events:
			fp.note(e)
		case text, ok := <-lines:
			if !ok {
				lines = nil
			}
			fp.answer(ctx, text, ok)
		}
		if fp.asking == nil && len(fp.pending) > 0 {
			q := fp.pending[0]
			fp.pending = fp.pending[1:]
			q.Message = fp.questionText(ctx, q)
			fp.asking = &q
			lines = fp.a.inputLines()
			fp.prompt()
		}
		if fp.asking == nil {
			lines = nil
			fp.p.SetProgress(fp.progress.line(fp.a.now()))
		}
	}
}

// note queues a question, or drops the questions an answer (from here or elsewhere)
// settled: an answer event names the fleet or the restart it answered.
func (fp *fleetPrompt) note(e fleetrun.Event) {
	if e.Type == restart.EventQuestion {
		fp.pending = append(fp.pending, e)
		return
	}
	same := func(q fleetrun.Event) bool { return q.RestartID == e.RestartID && q.JobID == e.JobID }
	fp.pending = dropWhere(fp.pending, same)
	if fp.asking != nil && same(*fp.asking) {
		fp.asking = nil
		fp.p.ClearProgress()
	}
}

func dropWhere(events []fleetrun.Event, drop func(fleetrun.Event) bool) []fleetrun.Event {
	out := events[:0]
	for _, e := range events {
		if !drop(e) {
			out = append(out, e)
		}
	}
	return out
}

// questionText is what to ask for a question event: a restart's event holds its question;
// the fleet's own holds its reason, and the record its question.
func (fp *fleetPrompt) questionText(ctx context.Context, e fleetrun.Event) string {
	if e.JobID != "" {
		return e.Message
	}
	rec, err := fp.fleets.Get(ctx, fp.rec.Namespace, fp.rec.ID)
	if err != nil || rec.Question == nil {
		return e.Message + " Continue? [y/N]"
	}
	return rec.Question.Prompt()
}

// prompt shows the question being asked, then an answer line kept below the fleet's
// lines (short, so that a narrow terminal does not cut it).
func (fp *fleetPrompt) prompt() {
	q := fp.asking
	label := ""
	if q.JobID != "" {
		label = "[" + q.JobID + "] "
	}
	fp.p.Header(fp.a.now(), label+q.Message)
	fp.reprompt()
}

func (fp *fleetPrompt) reprompt() {
	label := "fleet"
	if fp.asking.JobID != "" {
		label = fp.asking.JobID
	}
	fp.p.SetProgress(fmt.Sprintf("    Answer for %s: ", label))
}

// answer sends a typed line as the answer to the question asked (end of input: "no", as
// Nomad's prompt takes it).
func (fp *fleetPrompt) answer(ctx context.Context, text string, ok bool) {
	if fp.asking == nil {
		return
	}
	if !ok {
		text = "n"
	}
	fp.p.ClearProgress()
	_, err := fp.drv.Answer(ctx, fp.rec.Namespace, fp.rec.ID, strings.TrimSpace(text), fp.a.by())
	if err != nil {
		fp.p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + fmt.Sprintf("Answer %q not taken: %s", strings.TrimSpace(text), output.OneLine(err.Error())))
		if ok {
			fp.reprompt()
		}
		return
	}
	fp.asking = nil
}

// inputLines starts, once, a reader of stdin lines. The channel is closed at end of input.
// The reader goroutine may outlive the command while it waits on a terminal; that is the
// cost of a prompt that a detach (Ctrl-C) or an answer from elsewhere must be able to abandon.
func (a *app) inputLines() <-chan string {
	if a.lines != nil {
		return a.lines
	}
	ch := make(chan string)
	a.lines = ch
	if a.stdin == nil {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(a.stdin)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// readLine reads one line of input; ok is false at end of input or when ctx ends.
func (a *app) readLine(ctx context.Context) (line string, ok bool) {
	select {
	case line, ok = <-a.inputLines():
		return line, ok
	case <-ctx.Done():
		return "", false
	}
}
