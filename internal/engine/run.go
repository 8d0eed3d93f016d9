package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// run drives the record to a terminal status. Every decision is made from the record, so it
// can start from any state a former driver left.
func (d *driver) run(ctx context.Context) error {
	// Lazily: the first batch's intents carry it; a driver that dies before then leaves
	// the record as it found it, and the next one starts the same way.
	d.stepLazy(func(r *restart.Record) {
		if r.Status == restart.StatusPending {
			_ = r.SetStatus(restart.StatusRunning, "")
			r.StartTime = d.e.now()
			d.eventLocked(restart.Event{Type: restart.EventStarted, Message: "Restarting " + plural(len(r.Allocs), "allocation")})
		} else {
			d.eventLocked(restart.Event{Type: restart.EventDriver, Message: fmt.Sprintf("Driver %s took over the restart", d.e.holder)})
		}
	})
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d.mu.Lock()
		r := d.rec
		status, current, decided := r.Status, r.CurrentBatch, r.DecidedBatch
		next := firstOpenBatch(r)
		d.mu.Unlock()

		var err error
		switch {
		case status.Terminal():
			return nil
		case status == restart.StatusWaiting:
			err = d.awaitAnswer(ctx)
		case status == restart.StatusPaused:
			err = d.awaitResume(ctx)
		case next == 0 || next == current:
			// The batch in flight (or the last one) needs its allocations finished, then a
			// decision. A resumed batch is finished before any intent is obeyed.
			if next != 0 {
				if err = d.runBatch(ctx, next); err != nil {
					return err
				}
			}
			err = d.afterBatch(ctx, current)
		case current > 0 && decided < current:
			err = d.afterBatch(ctx, current)
		default:
			err = d.startBatch(ctx, next)
		}
		if err != nil {
			return err
		}
	}
}

// firstOpenBatch is the first batch with an allocation not yet terminal, 0 when none.
func firstOpenBatch(r *restart.Record) int {
	for _, a := range r.Allocs {
		if !a.State.Terminal() {
			return a.Batch
		}
	}
	return 0
}

// startBatch honours the batch wait, the operator's intent and the deployment guard, then
// starts batch b.
func (d *driver) startBatch(ctx context.Context, b int) error {
	// The wait between batches: NextBatchAt is persisted, so a resumed driver honours what is
	// left of it. Cancel and pause are obeyed during the wait.
	for {
		d.mu.Lock()
		at, intent := d.rec.NextBatchAt, d.rec.Control.Intent
		d.mu.Unlock()
		if intent == restart.IntentCancel || intent == restart.IntentPause {
			break
		}
		left := at.Sub(d.e.now())
		if at.IsZero() || left <= 0 {
			break
		}
		if err := d.waitChange(ctx, left); err != nil {
			return err
		}
	}
	d.mu.Lock()
	intent := d.rec.Control.Intent
	d.mu.Unlock()
	if intent == restart.IntentCancel || intent == restart.IntentPause {
		return d.obeyIntent(ctx)
	}
	// -surge: the extra allocations are up and healthy (and their deployment over) before
	// the deployment guard, which must not take the surge's own deployment for another's.
	if ok, err := d.surgeUp(ctx, b); err != nil || !ok {
		return err
	}
	// Nomad checks before every allocation and may abandon a half-started batch; checking
	// before each batch keeps batches whole. The budget's first reads (the job and its
	// summary) do not depend on it: they are made meanwhile, and used only if it passes.
	// The guards read what the feed cannot tell yet: a new driver's feed is synced first.
	d.feed.awaitFirstSync(ctx, firstSyncWait)
	first := make(chan budgetStart, 1)
	go func() { first <- d.readBudgetStart(ctx, b) }()
	if err := d.checkDeployment(ctx); err != nil {
		<-first
		var dep *DeploymentError
		if errors.As(err, &dep) {
			return d.finish(ctx, restart.StatusFailed, err.Error(), restart.EventFailed, "Stopping job restart: "+err.Error())
		}
		return err
	}
	// The availability budget: others (allocations already unhealthy) may be spending it.
	if ok, err := d.awaitBudget(ctx, b, <-first); err != nil || !ok {
		return err
	}
	// Lazily: the batch's intents, written before any of its requests, carry it; a driver
	// that died before then starts the batch again from the same checks.
	d.stepLazy(func(r *restart.Record) {
		r.CurrentBatch = b
		r.NextBatchAt = time.Time{}
		n := len(r.BatchAllocs(b))
		d.eventLocked(restart.Event{Type: restart.EventBatchStarted, Batch: b,
			Message: fmt.Sprintf("Restarting %s batch of %s", restart.Ordinal(b), plural(n, "allocation"))})
	})
	return nil
}

// obeyIntent ends the restart as canceled, or pauses it, as the operators' intent says
// (between batches, or while a batch's gates measure); any other intent is nothing to obey.
func (d *driver) obeyIntent(ctx context.Context) error {
	d.mu.Lock()
	intent, by := d.rec.Control.Intent, d.rec.Control.By
	d.mu.Unlock()
	switch intent {
	case restart.IntentCancel:
		return d.finish(ctx, restart.StatusCanceled, "canceled"+byWho(by), restart.EventCanceled, "Job restart canceled"+byWho(by))
	case restart.IntentPause:
		return d.step(ctx, func(r *restart.Record) {
			_ = r.SetStatus(restart.StatusPaused, "paused"+byWho(by))
			d.eventLocked(restart.Event{Type: restart.EventPaused, Message: "Restart paused" + byWho(by) + "; resume it with `nomad-restart resume " + r.ID + "`"})
		})
	}
	return nil
}

// runBatch handles the batch's open allocations concurrently and returns when all are
// terminal, or with the first error that stops the driver (store failure, ctx end).
func (d *driver) runBatch(ctx context.Context, b int) error {
	d.mu.Lock()
	idx := d.rec.BatchAllocs(b)
	ids := make([]string, len(idx))
	for k, i := range idx {
		ids[k] = d.rec.Allocs[i].ID
	}
	d.mu.Unlock()
	// The feed keeps the batch's allocations' full states while it runs.
	d.feed.pin(ids...)
	defer d.feed.unpin(ids...)
	if err := d.takeUp(ctx, idx); err != nil {
		return err
	}
	stop := d.startPlacements(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(idx))
	for _, i := range idx {
		d.mu.Lock()
		done := d.rec.Allocs[i].State.Terminal()
		d.mu.Unlock()
		if done {
			continue
		}
		wg.Go(func() {
			if err := d.handleAlloc(ctx, i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return ctx.Err()
}

// afterBatch decides what follows batch b, as Nomad's command does, and persists the decision.
func (d *driver) afterBatch(ctx context.Context, b int) error {
	d.mu.Lock()
	r := d.rec
	spec := d.spec
	var errs []string
	unrecoverable := false
	for _, i := range r.BatchAllocs(b) {
		if a := r.Allocs[i]; a.State == restart.AllocFailed {
			errs = append(errs, a.Error)
			unrecoverable = unrecoverable || a.Unrecovered
		}
	}
	last := firstOpenBatch(r) == 0
	waitAsk := r.BatchWaitAsk
	failedTotal := 0
	for _, a := range r.Allocs {
		if a.State == restart.AllocFailed {
			failedTotal++
		}
	}
	d.mu.Unlock()

	// The metric gates judge a batch whose allocations all came back: a batch with errors
	// needs a decision already, and its measurements would say nothing new.
	var gateFailed string
	if len(errs) == 0 {
		g, err := d.passGates(ctx, b)
		switch {
		case err != nil:
			return err
		case g.interrupted:
			return d.obeyIntent(ctx)
		}
		if gateFailed = g.failed; gateFailed != "" {
			errs = append(errs, gateFailed)
		}
	}

	hadErrs := len(errs) > 0
	if last {
		if hadErrs && spec.OnError == restart.OnErrorAsk && !spec.Yes {
			return d.ask(ctx, b, true, unrecoverable, true, false)
		}
		if gateFailed != "" {
			msg := "Job restart finished with errors: " + gateFailed
			return d.finish(ctx, restart.StatusFailed, msg, restart.EventFailed, msg)
		}
		if failedTotal > 0 {
			msg := fmt.Sprintf("Job restart finished with errors: %s failed", plural(failedTotal, "allocation"))
			return d.finish(ctx, restart.StatusFailed, msg, restart.EventFailed, msg)
		}
		return d.finish(ctx, restart.StatusSucceeded, "", restart.EventSucceeded, "Job restart finished")
	}
	switch {
	case hadErrs && spec.OnError == restart.OnErrorFail:
		msg := "Stopping job restart due to error: " + errs[0]
		return d.finish(ctx, restart.StatusFailed, msg, restart.EventFailed, msg)
	case hadErrs && spec.Yes && unrecoverable:
		msg := "Stopping job restart due to unrecoverable error: " + errs[0]
		return d.finish(ctx, restart.StatusFailed, msg, restart.EventFailed, msg)
	case gateFailed != "" && spec.Yes:
		// -yes answers Nomad's questions, not a gate's: what the service's metrics say
		// is not an error a script may wave through.
		msg := "Stopping job restart: " + gateFailed
		return d.finish(ctx, restart.StatusFailed, msg, restart.EventFailed, msg)
	case !spec.Yes && (waitAsk || (spec.OnError == restart.OnErrorAsk && hadErrs)):
		return d.ask(ctx, b, hadErrs, unrecoverable, false, waitAsk)
	}
	// Lazily: a driver that died before this was written decides the same again from the
	// record (and waits the whole batch wait, never less).
	d.stepLazy(func(*restart.Record) { d.proceedLocked(b) })
	return nil
}

// proceedLocked records the decision to go on after batch b and schedules the batch wait.
func (d *driver) proceedLocked(b int) {
	r := d.rec
	r.DecidedBatch = b
	d.eventLocked(restart.Event{Type: restart.EventBatchFinished, Batch: b, Message: fmt.Sprintf("Finished %s batch", restart.Ordinal(b))})
	if r.BatchWait > 0 {
		r.NextBatchAt = d.e.now().Add(r.BatchWait)
		d.eventLocked(restart.Event{Type: restart.EventBatchWait, Batch: b, Message: fmt.Sprintf("Waiting %s before restarting the next batch", r.BatchWait)})
	}
}

// ask puts a question to the operators and sets the status waiting.
func (d *driver) ask(ctx context.Context, b int, hadErrs, unrecoverable, last, waitAsk bool) error {
	return d.step(ctx, func(r *restart.Record) {
		q := restart.NewQuestion(uuid.NewString()[:8], b, hadErrs, unrecoverable, last, waitAsk, d.e.now())
		_ = r.SetStatus(restart.StatusWaiting, "waiting for an answer to: "+q.Prompt())
		r.Question = q
		d.eventLocked(restart.Event{Type: restart.EventQuestion, Batch: b, Message: q.Prompt()})
	})
}

// awaitAnswer waits until the open question is answered (or the restart canceled) and applies
// the answer.
func (d *driver) awaitAnswer(ctx context.Context) error {
	for {
		d.mu.Lock()
		r := d.rec
		q, c := r.Question, r.Control
		d.mu.Unlock()
		if q == nil { // a waiting record without a question: nothing to wait for
			return d.step(ctx, func(r *restart.Record) { _ = r.SetStatus(restart.StatusRunning, "") })
		}
		if c.Intent == restart.IntentCancel {
			return d.finish(ctx, restart.StatusCanceled, "canceled"+byWho(c.By), restart.EventCanceled, "Job restart canceled"+byWho(c.By))
		}
		if c.AnswerTo == q.ID {
			a, err := restart.ParseAnswer(q, c.Answer)
			if err == nil {
				return d.applyAnswer(ctx, q, c, a)
			}
			d.log.Warn("ignoring an invalid answer", "answer", c.Answer, "err", err)
		}
		if err := d.waitChange(ctx, 0); err != nil {
			return err
		}
	}
}

func (d *driver) applyAnswer(ctx context.Context, q *restart.Question, c restart.Control, a restart.Answer) error {
	d.mu.Lock()
	d.eventLocked(restart.Event{Type: restart.EventAnswer, Message: fmt.Sprintf("Answer %q%s to: %s", c.Answer, byWho(c.By), q.Prompt())})
	batch := d.rec.CurrentBatch
	d.mu.Unlock()
	switch {
	case q.Kind == restart.QuestionLastBatch && a.Proceed:
		return d.finish(ctx, restart.StatusSucceeded, "errors of the last batch ignored"+byWho(c.By), restart.EventSucceeded, "Job restart finished; the errors of the last batch were ignored"+byWho(c.By))
	case q.Kind == restart.QuestionLastBatch:
		msg := "Job restart finished with errors"
		return d.finish(ctx, restart.StatusFailed, msg, restart.EventFailed, msg)
	case !a.Proceed:
		return d.finish(ctx, restart.StatusCanceled, "canceled at the question"+byWho(c.By), restart.EventCanceled, "Job restart canceled")
	}
	return d.step(ctx, func(r *restart.Record) {
		_ = r.SetStatus(restart.StatusRunning, "")
		if a.Wait != nil {
			r.BatchWait = *a.Wait
			r.BatchWaitAsk = false
			d.eventLocked(restart.Event{Type: restart.EventAnswer, Message: fmt.Sprintf("Proceeding restarts with new wait time of %s", r.BatchWait)})
		}
		d.proceedLocked(batch)
	})
}

// awaitResume holds a paused restart until the intent is run (or cancel).
func (d *driver) awaitResume(ctx context.Context) error {
	for {
		d.mu.Lock()
		c := d.rec.Control
		d.mu.Unlock()
		switch c.Intent {
		case restart.IntentCancel:
			return d.finish(ctx, restart.StatusCanceled, "canceled"+byWho(c.By), restart.EventCanceled, "Job restart canceled"+byWho(c.By))
		case restart.IntentRun, "":
			return d.step(ctx, func(r *restart.Record) {
				_ = r.SetStatus(restart.StatusRunning, "")
				d.eventLocked(restart.Event{Type: restart.EventResumed, Message: "Restart resumed" + byWho(c.By)})
			})
		}
		if err := d.waitChange(ctx, 0); err != nil {
			return err
		}
	}
}

// finish ends the restart.
func (d *driver) finish(ctx context.Context, status restart.Status, reason string, typ restart.EventType, msg string) error {
	// -surge: every end of a restart scales its groups back first.
	if err := d.surgeDown(ctx); err != nil {
		return err
	}
	return d.step(ctx, func(r *restart.Record) {
		if err := r.SetStatus(status, reason); err != nil {
			d.log.Error("illegal status change", "err", err)
			r.Status, r.Reason, r.Question = status, reason, nil
		}
		r.EndTime = d.e.now()
		r.NextBatchAt = time.Time{}
		d.eventLocked(restart.Event{Type: typ, Message: msg})
	})
}

func byWho(by string) string {
	if by == "" {
		return ""
	}
	return " by " + by
}
