package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// RetryPolicy bounds the retries of one idempotent read on transient errors (see
// IsTransient): capped exponential backoff with jitter, for at most MaxElapsed.
type RetryPolicy struct {
	// Initial is the first backoff; each retry doubles it up to Max.
	Initial time.Duration
	Max     time.Duration
	// MaxElapsed bounds the time spent retrying one read; past it the last error is
	// returned. Zero means until ctx ends.
	MaxElapsed time.Duration
	// SilentTries bounds the requests that got no answer in time (upstream.NoAnswerError)
	// one read sends: a server that accepts connections and never answers costs that many
	// request timeouts, not MaxElapsed. Zero: DefaultSilentTries.
	SilentTries int
}

// DefaultSilentTries is how many requests one read sends to a server that does not answer.
// With the default request timeout (upstream.DefaultTimeout, 10 s) and the backoff in
// between, a read gives up after about 31 s, well within DefaultRetryPolicy's minute; with
// a longer timeout MaxElapsed ends it sooner (no try starts past it).
const DefaultSilentTries = 3

// DefaultRetryPolicy rides out a leader election (Nomad's take a few seconds) and brief
// network trouble, and gives up after a minute so that the caller can say what is wrong.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: time.Minute, SilentTries: DefaultSilentTries}
}

func (p RetryPolicy) silentTries() int {
	if p.SilentTries > 0 {
		return p.SilentTries
	}
	return DefaultSilentTries
}

// backoff returns the wait before retry number attempt (0-based): Initial·2^attempt capped
// at Max, with "equal jitter" (half fixed, half random) so that many watchers failing
// together do not retry in lockstep.
func (p RetryPolicy) backoff(attempt int) time.Duration {
	d := p.Initial
	if d <= 0 {
		d = DefaultRetryPolicy().Initial
	}
	limit := p.Max
	if limit <= 0 {
		limit = DefaultRetryPolicy().Max
	}
	for i := 0; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	return half + rand.N(half+1)
}

// Retry is the project's one retry loop: it runs op until it succeeds, fails with an error
// that is not transient (IsTransient), ctx ends, or p's time is spent, backing off with
// jitter between attempts; what names the operation in the debug log (log may be nil).
//
// Use it for reads and for writes that are safe to repeat, once per operation: never
// around a call that retries already (the Cluster's reads, the stores' requests), so that
// how long an outage takes to surface is bounded by one policy.
func Retry[T any](ctx context.Context, p RetryPolicy, log *slog.Logger, what string, op func(context.Context) (T, error)) (T, error) {
	return retry(ctx, p, log, what, IsTransient, op)
}

// RetryDo is Retry for an operation that returns only an error.
func RetryDo(ctx context.Context, p RetryPolicy, log *slog.Logger, what string, op func(context.Context) error) error {
	_, err := retry(ctx, p, log, what, IsTransient, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, op(ctx)
	})
	return err
}

// retry runs op until it succeeds, fails with an error retryable does not accept, ctx ends,
// or the policy's time or silent tries are spent. what names the operation for logs. Each
// attempt's context records its answers, so that one op could not decode is named for
// what answered (upstream.Explain).
func retry[T any](ctx context.Context, p RetryPolicy, log *slog.Logger, what string, retryable func(error) bool, op func(context.Context) (T, error)) (T, error) {
	b := &Backoff{policy: p, start: time.Now()} // MaxElapsed counts the first attempt too
	silent := 0
	for {
		actx := upstream.Record(ctx)
		v, err := op(actx)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			var zero T
			return zero, ctxErr(ctx, err)
		}
		err = upstream.Explain(actx, err)
		if !retryable(err) {
			return v, gaveUp(err, b.attempt+1)
		}
		if _, ok := errors.AsType[*upstream.NoAnswerError](err); ok {
			silent++
			if silent >= p.silentTries() {
				return v, gaveUp(err, b.attempt+1)
			}
		}
		if log != nil {
			log.Debug("retrying Nomad request", "op", what, "attempt", b.attempt+1, "err", err)
		}
		if !b.Wait(ctx) {
			if ctx.Err() != nil {
				var zero T
				return zero, ctxErr(ctx, err)
			}
			if _, ok := upstream.Find(err); ok {
				return v, gaveUp(err, b.attempt+1)
			}
			return v, fmt.Errorf("%w (gave up after %d attempts in %s)", err, b.attempt+1, time.Since(b.start).Round(time.Millisecond))
		}
	}
}

// gaveUp notes on a request that got no answer how many tries the loop made, which its
// one line then says.
func gaveUp(err error, tries int) error {
	if na, ok := errors.AsType[*upstream.NoAnswerError](err); ok && tries > 1 {
		na.Tries = tries
	}
	return err
}

// Backoff paces a loop that repeats an operation by hand, where Retry does not fit: a
// write sent again only after Nomad's facts show it did not take effect, or a watch that
// resumes after a failure while its context lasts. It waits as Retry does (the policy's
// capped exponential backoff with jitter) and gives up as Retry does (MaxElapsed after its
// first wait; zero: only when ctx ends). Use it only around calls that do not retry inside.
type Backoff struct {
	policy  RetryPolicy
	attempt int
	start   time.Time
}

// NewBackoff returns a Backoff with policy p.
func NewBackoff(p RetryPolicy) *Backoff { return &Backoff{policy: p} }

// Wait sleeps before the next attempt. It reports false, without sleeping the whole wait,
// when ctx ends or when the wait would pass the policy's MaxElapsed.
func (b *Backoff) Wait(ctx context.Context) bool {
	if b.start.IsZero() {
		b.start = time.Now()
	}
	wait := b.policy.backoff(b.attempt)
	if b.policy.MaxElapsed > 0 && time.Since(b.start)+wait > b.policy.MaxElapsed {
		return false
	}
	b.attempt++
	return Sleep(ctx, wait)
}

// Attempts is how many waits the backoff has slept so far.
func (b *Backoff) Attempts() int { return b.attempt }

// Elapsed is the time since the backoff's first wait (0 before it).
func (b *Backoff) Elapsed() time.Duration {
	if b.start.IsZero() {
		return 0
	}
	return time.Since(b.start)
}

// Reset starts over after an attempt that succeeded: the next wait is the shortest again,
// and MaxElapsed counts from it.
func (b *Backoff) Reset() { b.attempt, b.start = 0, time.Time{} }

// ctxErr is the error for a context that ended while err was the last failure: the
// context's error, with err's text where it says more (the error Nomad gave before).
func ctxErr(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
}

// pacer slows a watch loop whose blocking reads come back without a newer index. Nomad
// answers such a read only when its wait ends, but an agent behind a proxy that drops the
// query string, or a broken blocking query, answers at once: without pacing the loop would
// hammer Nomad. A read that made progress resets it.
type pacer struct {
	policy RetryPolicy
	idle   int
}

// next waits, if the last read made no progress, and reports whether ctx is still live.
func (p *pacer) next(ctx context.Context, progressed bool) bool {
	if progressed {
		p.idle = 0
		return ctx.Err() == nil
	}
	p.idle++
	return Sleep(ctx, p.policy.backoff(p.idle-1))
}
