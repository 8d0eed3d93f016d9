package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Every loop of a driver that sends a request to Nomad again (a restart, a stop, an
// evaluation, a surge's scale) or reads again after a refusal is bounded by the engine's
// retry budget (Config.Retry): Nomad failing in a way that passes (cluster.IsTransient)
// for longer than that is recorded as a warning in the restart's record, naming what
// failed, for how long and Nomad's last answer, and the step then fails (an allocation:
// -on-error decides what follows; the surge: the restart fails, its counts restored).
// Nothing waits on Nomad silently for ever.

// resendPolicy paces a request sent again after Nomad's facts showed that the failed one did
// not take effect (sendRestart, sendStop): quick at first, as a lost answer is usually a
// blip, and bounded by the engine's budget.
func (e *Engine) resendPolicy() cluster.RetryPolicy {
	return cluster.RetryPolicy{Initial: 50 * time.Millisecond, Max: 3 * time.Second, MaxElapsed: e.retry.MaxElapsed}
}

// scalePolicy paces the surge's reads of the job after a scale request Nomad did not take
// (a conflict: the job changed since it was read; a passing failure; a deployment that
// blocked it), so that a job changing under the surge is not read in a tight loop, bounded
// by the engine's budget.
func (e *Engine) scalePolicy() cluster.RetryPolicy {
	p := cluster.DefaultRetryPolicy()
	p.MaxElapsed = e.retry.MaxElapsed
	return p
}

// warnRetriesSpent records that Nomad kept failing what (words such as "the restart of
// allocation X") until b's budget was spent (nil b: a cluster.Retry's, whose error says
// how long), with its last answer err, as a warning event (of allocation a, when given)
// before the caller fails the step.
func (d *driver) warnRetriesSpent(ctx context.Context, a *restart.AllocProgress, what string, b *cluster.Backoff, err error) error {
	e := restart.Event{Type: restart.EventWarning, Message: retriesSpent(what, b, err)}
	if a != nil {
		e.AllocID, e.Batch = a.ID, a.Batch
	}
	return d.step(ctx, func(*restart.Record) { d.eventLocked(e) })
}

// waitToResend waits b's next pause before a request about allocation p is sent again, and
// reports whether it may be; when b's budget is spent, it first records the warning that
// says what (warnRetriesSpent) kept failing with err, and returns the recording's error.
func (d *driver) waitToResend(ctx context.Context, b *cluster.Backoff, p *restart.AllocProgress, what string, err error) (bool, error) {
	if b.Wait(ctx) {
		return true, nil
	}
	if ctx.Err() == nil {
		if werr := d.warnRetriesSpent(ctx, p, what, b, err); werr != nil {
			return false, werr
		}
	}
	return false, nil
}

// resendOrFail decides what follows a request (a "restart" or a "stop") of allocation p
// that failed with err: nil to send it again, after b's backoff; else what ends the
// allocation, an allocFailure of err (a permanent error, or retries spent), worded by fail
// when fail is not nil.
func (d *driver) resendOrFail(ctx context.Context, b *cluster.Backoff, p *restart.AllocProgress, request string, err error, fail func(error) error) error {
	if fail == nil {
		fail = func(err error) error { return err }
	}
	if !cluster.IsTransient(err) {
		return &allocFailure{fail(err)}
	}
	d.log.Warn(request+" request failed; checking and retrying", "alloc", p.ID, "err", err)
	resend, werr := d.waitToResend(ctx, b, p, fmt.Sprintf("the %s of allocation %q", request, p.ID), err)
	if werr != nil {
		return werr
	}
	if !resend {
		return &allocFailure{fail(fmt.Errorf("%w (gave up retrying: %v)", err, gaveUp(ctx)))}
	}
	return nil
}

// retriesSpent words a budget spent on Nomad's failures.
func retriesSpent(what string, b *cluster.Backoff, err error) string {
	if b == nil {
		return fmt.Sprintf("Nomad kept failing %s; giving up: %s", what, oneLineErr(err))
	}
	return fmt.Sprintf("Nomad kept failing %s for %s (%s); giving up: %s",
		what, b.Elapsed().Round(time.Millisecond), plural(b.Attempts()+1, "attempt"), oneLineErr(err))
}
