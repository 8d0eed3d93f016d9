package nomadvars

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Lock names a variable lock its holder took with AcquireLock.
type Lock struct {
	Namespace, Path string
	// ID is the lock's ID, which Nomad gave the holder: it proves whose the lock is.
	ID string
}

// AcquireLock takes the lock of the variable v names (creating the variable with v's items
// if needed), to live ttl unrenewed and to be free lockDelay after it expired. It returns
// the variable as written and the Lock, or ErrLockHeld when another holds it.
//
// It is retried on passing failures. Were a first try to land and its answer be lost, the
// retry finds the lock held and says so; that lock then expires after its TTL.
func (c *Client) AcquireLock(ctx context.Context, v *Variable, ttl, lockDelay time.Duration) (*Variable, Lock, error) {
	ns := Namespace(v.Namespace)
	got, err := do(ctx, c, opWrite, ns, v.Path, func(ctx context.Context) (*api.Variable, error) {
		in := v.toAPI()
		in.Namespace = ns
		in.Lock = &api.VariableLock{TTL: ttl.String(), LockDelay: lockDelay.String()}
		got, _, err := c.api.Variables().AcquireLock(in, c.writeOptions(ctx, ns))
		if StatusOf(err) == http.StatusConflict || (err == nil && got.LockID() == "") {
			return nil, ErrLockHeld
		}
		return got, err
	})
	if err != nil {
		return nil, Lock{}, err
	}
	return fromAPI(got), Lock{Namespace: ns, Path: v.Path, ID: got.LockID()}, nil
}

// RenewLock extends l's TTL, or returns ErrLockLost when Nomad says l is no longer held.
// It is tried once: the holder renews on a timer and alone knows how long it may still try.
func (c *Client) RenewLock(ctx context.Context, l Lock) error {
	_, err := do(ctx, c.Watching(), opWrite, l.Namespace, l.Path, func(ctx context.Context) (struct{}, error) {
		v := &api.Variable{Namespace: l.Namespace, Path: l.Path, Lock: &api.VariableLock{ID: l.ID}}
		_, _, err := c.api.Variables().RenewLock(v, c.writeOptions(ctx, l.Namespace))
		return struct{}{}, lockErr(err)
	})
	return err
}

// ReleaseLock frees l so another may take it at once, keeping the variable; it returns the
// variable as released (without its items: Nomad answers a release without them), or
// ErrLockLost when l was no longer held.
func (c *Client) ReleaseLock(ctx context.Context, l Lock) (*Variable, error) {
	out, err := do(ctx, c, opWrite, l.Namespace, l.Path, func(ctx context.Context) (*api.Variable, error) {
		// Nomad refuses items on a release: the lock ID alone says whose it is.
		v := &api.Variable{Namespace: l.Namespace, Path: l.Path, Lock: &api.VariableLock{ID: l.ID}}
		out, _, err := c.api.Variables().ReleaseLock(v, c.writeOptions(ctx, l.Namespace))
		return out, lockErr(err)
	})
	return fromAPI(out), err
}

// lockErr maps Nomad's answers meaning "this lock is not yours (any more)" to ErrLockLost:
// a conflict, a missing variable, or one that holds no lock.
func lockErr(err error) error {
	switch {
	case err == nil:
		return nil
	case StatusOf(err) == http.StatusConflict, StatusOf(err) == http.StatusNotFound, lockGone(err):
		return &lockLostError{err: err}
	}
	var conflict api.ErrCASConflict
	if errors.As(err, &conflict) {
		return &lockLostError{err: err}
	}
	return err
}

// lockLostError is ErrLockLost with Nomad's words. Neither its chain nor its text holds
// Nomad's status, so that no retry takes a 500 "doesn't hold a lock" for a passing failure.
type lockLostError struct{ err error }

func (e *lockLostError) Error() string {
	var ure api.UnexpectedResponseError
	if errors.As(e.err, &ure) && ure.Body() != "" {
		return ErrLockLost.Error() + " (Nomad: " + strings.TrimSpace(ure.Body()) + ")"
	}
	var pure *api.UnexpectedResponseError
	if errors.As(e.err, &pure) && pure != nil && pure.Body() != "" {
		return ErrLockLost.Error() + " (Nomad: " + strings.TrimSpace(pure.Body()) + ")"
	}
	return ErrLockLost.Error()
}

func (e *lockLostError) Is(target error) bool { return target == ErrLockLost }
