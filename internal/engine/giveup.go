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
// not take effect (resend: a restart or a stop): quick at first, as a lost answer is usually a
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

// allocRequest is a request about one allocation (its in-place restart, its stop), as
// resend sends it.
type allocRequest struct {
	// name says what the request is ("restart", "stop"), in logs and messages.
	name string
	// former asks Nomad's facts whether a request sent before (by a former attempt or
	// driver) took effect. done: the allocation is past the request (it took effect, or the
	// allocation is gone), and err is what sending it ends with.
	former func(ctx context.Context, i int, p restart.AllocProgress) (done bool, err error)
	// send sends the request (fresh: see resend) and records it when it went out: sent says
	// it went out, and err is then the recording's error, else the request's.
	send func(ctx context.Context, i int, p restart.AllocProgress, fresh bool, drain *allocDrain) (sent bool, err error)
	// fail words the allocation's failure from the request's error (nil: the error as it is).
	fail func(error) error
}

// resend sends req about allocation i, whose intent is persisted (fresh: by this driver,
// just now, with no former attempt to check for). A driver that did not persist the intent
// itself first asks Nomad's facts whether the request already took effect, so that no task is
// restarted or stopped twice. Transient failures are retried the same way: facts first, then
// the request again, with Attempts persisted before each.
func (d *driver) resend(ctx context.Context, i int, fresh bool, req allocRequest) error {
	b := cluster.NewBackoff(d.e.resendPolicy())
	drain := &allocDrain{d: d, i: i}
	defer drain.done()
	for {
		p := d.progress(i)
		if !fresh {
			if done, err := req.former(ctx, i, p); done {
				return err
			}
			if err := d.step(ctx, func(r *restart.Record) { r.Allocs[i].Attempts++ }); err != nil {
				return err
			}
		}
		if err := drain.before(ctx); err != nil {
			return err
		}
		sent, err := req.send(ctx, i, p, fresh, drain)
		if sent {
			return err
		}
		if err := d.resendOrFail(ctx, b, &p, req.name, err, req.fail); err != nil {
			return err
		}
		fresh = false
	}
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
