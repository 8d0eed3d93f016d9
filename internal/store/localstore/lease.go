package localstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/nomad-restart/nomad-restart/internal/store"
)

// localLease is an exclusive flock on the restart's lease file. The kernel drops it when
// the holding process dies, however it dies, so another driver can take over at once.
type localLease struct {
	lock *flock.Flock
	once sync.Once
	// lost is never closed: a flock cannot be taken away from a living process.
	lost chan struct{}
}

// AcquireLease implements store.Store.
func (l *Store) AcquireLease(ctx context.Context, namespace, id, holder string) (store.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rec, err := l.Get(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	lease, err := l.lockLease(rec.Namespace, rec.ID, holder)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// lockLease takes the file lock of restart id's lease for holder, or returns ErrLeaseHeld.
func (l *Store) lockLease(namespace, id, holder string) (*localLease, error) {
	p := l.leasePath(namespace, id)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("local store: %w", err)
	}
	fl := flock.New(p, flock.SetPermissions(0o600))
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("local store: locking %s: %w", p, err)
	}
	if !ok {
		return nil, store.ErrLeaseHeld
	}
	// The holder is written for humans only (who drives this?); the lock is the truth.
	_ = os.WriteFile(p+".holder", []byte(holder+"\n"), 0o600)
	return &localLease{lock: fl, lost: make(chan struct{})}, nil
}

// drop removes the files of a lease whose record was never written, then unlocks it.
func (ll *localLease) drop() {
	ll.once.Do(func() {
		_ = os.Remove(ll.lock.Path() + ".holder")
		_ = os.Remove(ll.lock.Path())
		_ = ll.lock.Unlock()
	})
}

func (ll *localLease) Lost() <-chan struct{} { return ll.lost }

func (ll *localLease) Release(ctx context.Context) error {
	var err error
	ll.once.Do(func() {
		_ = os.Remove(ll.lock.Path() + ".holder")
		if uerr := ll.lock.Unlock(); uerr != nil {
			err = fmt.Errorf("local store: releasing lease %s: %w", ll.lock.Path(), uerr)
		}
	})
	return err
}

// LeaseExpiry implements store.Records: a local lease is a file lock, free as soon as its holder
// dies.
func (l *Store) LeaseExpiry() (ttl, lockDelay time.Duration) { return 0, 0 }

// LeaseHolder implements store.Records: the holder written beside the lock file.
func (l *Store) LeaseHolder(ctx context.Context, namespace, id string) (string, error) {
	rec, err := l.Get(ctx, namespace, id)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(l.leasePath(rec.Namespace, rec.ID) + ".holder")
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(b)), nil
}
