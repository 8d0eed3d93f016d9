package engine

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// permanentTexts are Nomad answers that repeating the request cannot change, even when Nomad
// sends them with a 5xx code (its client-forwarded errors are 500s).
var permanentTexts = []string{"Task not running", "should not run", "not found", "Unknown allocation", "unknown allocation", restart.PermissionDenied}

// transientTexts are failures of the way to Nomad, or of Nomad's leadership, that pass.
var transientTexts = []string{"No cluster leader", "connection refused", "connection reset", "EOF", "timeout", "i/o timeout", "Unexpected response code: 5", "Unexpected response code: 429", "rpc error"}

// transient reports whether err is worth repeating: a transport failure, a 5xx or 429 answer,
// or a lost leader; never a missing object, a refusal, or a placement failure.
func transient(err error) bool {
	var f *final
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &f) {
		return false
	}
	if errors.Is(err, cluster.ErrAllocNotFound) || errors.Is(err, cluster.ErrJobNotFound) ||
		errors.Is(err, cluster.ErrPermissionDenied) || errors.Is(err, restart.ErrPlacementFailure) {
		return false
	}
	msg := err.Error()
	for _, t := range permanentTexts {
		if strings.Contains(msg, t) {
			return false
		}
	}
	var coded interface{ StatusCode() int }
	if errors.As(err, &coded) {
		c := coded.StatusCode()
		return c >= 500 || c == 429
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	for _, t := range transientTexts {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}

// backoff is a capped exponential backoff with jitter.
type backoff struct{ next time.Duration }

func (b *backoff) wait(ctx context.Context) error {
	if b.next == 0 {
		b.next = 50 * time.Millisecond
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next *= 2
	if b.next > 3*time.Second {
		b.next = 3 * time.Second
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retry calls f until it succeeds, fails permanently, or ctx ends; transient failures are
// repeated with backoff. Only for reads and for writes that are safe to repeat.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var b backoff
	for {
		v, err := f()
		if err == nil || !transient(err) {
			return v, err
		}
		if werr := b.wait(ctx); werr != nil {
			return v, err
		}
	}
}
