package store

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// nomadLease is a Nomad variable lock on <record>/lease, renewed at half its TTL until
// released. When renewals fail for a whole TTL, or Nomad says the lock is no longer ours,
// the lease is lost: another driver may take it once Nomad's lock delay has passed.
type nomadLease struct {
	n      *Nomad
	ns     string
	path   string
	holder string
	lockID string

	lost     chan struct{}
	lostOnce sync.Once
	stop     context.CancelFunc
	done     chan struct{}
	release  sync.Once
}

// AcquireLease implements Store.
func (n *Nomad) AcquireLease(ctx context.Context, namespace, id, holder string) (Lease, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	// The lock lives beside the record; refuse a lease on a restart that does not exist.
	if _, _, err := n.readHead(ctx, h, 0); err != nil {
		if errors.Is(err, ErrNotFound) {
			n.forget(h)
		}
		return nil, err
	}
	if holder == "" {
		holder = "unknown"
	}
	path := n.headPath(h.jobSeg, h.id) + "/lease"
	v := &api.Variable{
		Namespace: h.ns,
		Path:      path,
		Items:     map[string]string{"holder": holder},
		Lock:      &api.VariableLock{TTL: n.opts.LockTTL.String(), LockDelay: n.opts.LockDelay.String()},
	}
	// Retried on passing failures. Were a first try to land and its answer be lost, the
	// retry finds the lock held and says so; that lock then expires after its TTL.
	var got *api.Variable
	err = retry(ctx, func() (err error) {
		got, _, err = n.client.Variables().AcquireLock(v, n.wo(ctx, h.ns))
		return err
	})
	if err != nil {
		if statusOf(err) == http.StatusConflict {
			return nil, ErrLeaseHeld
		}
		return nil, n.mapErr(ctx, err, "write", h.ns, path)
	}
	if got.LockID() == "" {
		return nil, ErrLeaseHeld
	}
	runCtx, stop := context.WithCancel(context.Background())
	l := &nomadLease{n: n, ns: h.ns, path: path, holder: holder, lockID: got.LockID(),
		lost: make(chan struct{}), stop: stop, done: make(chan struct{})}
	go l.renew(runCtx)
	return l, nil
}

func (l *nomadLease) Lost() <-chan struct{} { return l.lost }

func (l *nomadLease) markLost(reason string, err error) {
	l.lostOnce.Do(func() {
		l.n.opts.Logger.Warn("restart lease lost", "path", l.path, "namespace", l.ns, "reason", reason, "error", err)
		close(l.lost)
	})
}

// renew keeps the lock alive. A renewal that fails for a passing reason (a leader
// election, a network blip) is retried every second until the TTL since the last good
// renewal has run out; a conflict or a missing lock means another holds it now.
func (l *nomadLease) renew(ctx context.Context) {
	defer close(l.done)
	every := l.n.opts.RenewEvery
	ttl := 2 * every // the TTL as the renewals see it (shorter on a sped-up simulation)
	lastOK := time.Now()
	next := every
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		v := &api.Variable{Namespace: l.ns, Path: l.path, Lock: &api.VariableLock{ID: l.lockID}}
		_, _, err := l.n.client.Variables().RenewLock(v, (&api.WriteOptions{Namespace: l.ns}).WithContext(ctx))
		switch {
		case err == nil:
			lastOK = time.Now()
			next = every
		case ctx.Err() != nil:
			return
		case statusOf(err) == http.StatusConflict || statusOf(err) == http.StatusNotFound:
			l.markLost("Nomad no longer holds the lock for this driver", err)
			return
		case time.Since(lastOK) >= ttl:
			l.markLost("renewals failed for a whole TTL", err)
			return
		default:
			l.n.opts.Logger.Debug("restart lease renewal failed; retrying", "path", l.path, "error", err)
			next = max(min(every/4, ttl-time.Since(lastOK)), time.Millisecond)
		}
	}
}

// Release stops the renewals and unlocks, so another driver may take the lease at once. It
// unlocks even when ctx has ended (Ctrl-C detaching a driver is when it matters most).
func (l *nomadLease) Release(ctx context.Context) error {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	var err error
	l.release.Do(func() {
		l.stop()
		<-l.done
		select {
		case <-l.lost:
			return // nothing of ours to release
		default:
		}
		// Nomad refuses items on a release: the lock ID alone says whose it is.
		v := &api.Variable{Namespace: l.ns, Path: l.path, Lock: &api.VariableLock{ID: l.lockID}}
		var released *api.Variable
		rerr := retry(ctx, func() (err error) {
			released, _, err = l.n.client.Variables().ReleaseLock(v, (&api.WriteOptions{Namespace: l.ns}).WithContext(ctx))
			return err
		})
		if rerr != nil && statusOf(rerr) != http.StatusConflict {
			err = l.n.mapErr(ctx, rerr, "write", l.ns, l.path)
		}
		if rerr == nil && released != nil {
			l.dropEndedLease(ctx, released.ModifyIndex)
		}
	})
	return err
}
