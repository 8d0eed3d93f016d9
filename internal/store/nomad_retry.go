package store

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"
)

// transient reports whether a request's failure may pass on its own: Nomad's 5xx answers
// (no leader during an election, an RPC timeout) and failures to reach it at all.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch code := statusOf(err); {
	case code >= http.StatusInternalServerError:
		return true
	case code != 0:
		return false // 4xx: the request itself is wrong or refused
	}
	var conflict api.ErrCASConflict
	return !errors.Is(err, ErrNotFound) && !errors.Is(err, api.ErrVariablePathNotFound) && !errors.As(err, &conflict)
}

// retryAttempts bounds how often one request is tried. A big record is dozens of requests,
// so without retries a cluster failing a few percent of requests would fail most reads.
const retryAttempts = 5

// retry runs fn until it succeeds, fails for good, or has been tried retryAttempts times,
// backing off between tries. Only idempotent requests go through it.
func retry(ctx context.Context, fn func() error) error {
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !transient(err) || attempt >= retryAttempts || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff *= 2
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
