// Package store keeps restart records durable. Store is the interface; the Nomad Variables
// implementation keeps records in the cluster (any machine can attach, steer or resume), the
// local one in a file under the user's state directory. One shared suite tests both.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Store keeps restart records. Every write is a check-and-set on the record's ModifyIndex,
// and a written record is never seen half-written.
type Store interface {
	// Create stores a new record and sets its CreateIndex and ModifyIndex. It fails with
	// *JobBusyError when a restart of the same job (namespace and job ID) is not terminal,
	// atomically: of two concurrent Creates for one job, one fails; and with ErrExists when
	// a record of the same ID exists.
	Create(ctx context.Context, rec *restart.Record) error
	// Get reads a record by its full ID; ErrNotFound if none.
	Get(ctx context.Context, namespace, id string) (*restart.Record, error)
	// Find resolves an ID or unique prefix across the namespaces the store can see
	// (namespace "" or "*" for all); ErrNotFound, or *AmbiguousIDError.
	Find(ctx context.Context, namespace, prefix string) (*restart.Record, error)
	// List returns the records, newest CreateTime first, filtered.
	List(ctx context.Context, f Filter) ([]*restart.Record, error)
	// Update writes rec if its ModifyIndex still matches the stored one, and then sets rec's
	// ModifyIndex (and ModifyTime) to the new values. On a mismatch it returns ErrConflict
	// and changes nothing. When rec's status becomes terminal the job is freed for a new
	// restart. It keeps nothing of rec (its slices may be reused once it returns).
	Update(ctx context.Context, rec *restart.Record) error
	// Watch blocks until the stored record's ModifyIndex is greater than afterIndex, then
	// returns it. It returns ctx's error when ctx ends first.
	Watch(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error)
	// WatchHead is Watch for a reader that follows only the record's status and Control (a
	// driver watching for operators' intents): the record it returns may lack its Allocs
	// and Events, so a wake-up costs the same whatever the job's size.
	WatchHead(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error)
	// WatchControl is how a driver follows operators' steering: with token 0 it answers at
	// once with the first token (the record may be nil: read it after this call, so that
	// no change stored before the token is missed); otherwise it blocks until an operator
	// may have changed the record's Control since the call that returned token, and
	// returns the record as WatchHead does. It returns the token to pass next. The Nomad store is not woken by the driver's own writes (see
	// Ring); the local store, whose reads cost no request, is woken by every write.
	WatchControl(ctx context.Context, namespace, id string, token uint64) (*restart.Record, uint64, error)
	// Ring wakes the record's WatchControl after an operator stored a change of Control.
	// Mutate calls it; a failed ring delays the driver's notice until its next write, whose
	// check-and-set then fails on the changed record.
	Ring(ctx context.Context, namespace, id string) error
	// AcquireLease takes the driver's lease on a restart, or fails with ErrLeaseHeld. The
	// lease renews itself until released or lost.
	AcquireLease(ctx context.Context, namespace, id, holder string) (Lease, error)
	// Kind names the store for humans: "nomad" or "local".
	Kind() string
}

// Lease is the right to drive one restart. A process that dies loses it: on the Nomad store
// when its TTL passes (plus Nomad's lock delay), on the local store at once.
type Lease interface {
	// Lost is closed when the lease could not be renewed and may now be held by another.
	Lost() <-chan struct{}
	// Release gives the lease up so another driver may take it at once.
	Release(ctx context.Context) error
}

// Filter selects records in List.
type Filter struct {
	Namespace string // "" or "*" for all
	JobID     string // "" for all
	// Active keeps only records whose status is not terminal.
	Active bool
}

// Errors of stores, to be matched with errors.Is / errors.As.
var (
	ErrNotFound  = errors.New("restart not found")
	ErrConflict  = errors.New("restart record changed since it was read")
	ErrLeaseHeld = errors.New("restart is driven by another process")
	// ErrExists says Create met a record of the same ID: a restart whose ID is derived from
	// what it answers (a config-change rollout) was filed already, maybe by another agent.
	ErrExists = errors.New("restart already exists")
)

// JobBusyError says a job already has a restart in progress: which job, and which
// restart. What to do about it (attach, cancel) is the caller's to say.
type JobBusyError struct {
	Namespace, JobID, RestartID string
}

func (e *JobBusyError) Error() string {
	return fmt.Sprintf("job %q already has restart %s in progress", e.JobID, shortID(e.RestartID))
}

// AmbiguousIDError says a prefix matched several restarts (or fleets).
type AmbiguousIDError struct {
	Prefix  string
	Matches []string
	// Kind is what the IDs name, for the message: "restart" when empty, or "fleet".
	Kind string
}

func (e *AmbiguousIDError) Error() string {
	kind := cmp.Or(e.Kind, "restart")
	return fmt.Sprintf("%s ID prefix %q matched %d %ss; give more characters of the ID", kind, e.Prefix, len(e.Matches), kind)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// Mutate reads a record, applies change and writes it back, retrying on conflicts. It is how
// operators change Control and how anyone makes a small change without holding the lease.
// A change of Control rings the record's driver (Store.Ring).
func Mutate(ctx context.Context, s Store, namespace, id string, change func(*restart.Record) error) (*restart.Record, error) {
	var before restart.Control
	rec, err := nomadvars.ReadChangeWrite(ctx, ErrConflict,
		func() (*restart.Record, error) { return s.Get(ctx, namespace, id) },
		func(rec *restart.Record) (bool, error) { before = rec.Control; return true, change(rec) },
		func(rec *restart.Record) error { return s.Update(ctx, rec) })
	if err != nil {
		return nil, err // the record as change left it is not the caller's to see
	}
	if rec.Control != before && !rec.Status.Terminal() {
		// Best effort: the change is stored, and the driver meets it at its next write
		// if the ring is lost.
		_ = s.Ring(ctx, rec.Namespace, rec.ID)
	}
	return rec, nil
}

type unhurriedKey struct{}

// Unhurried marks a write that nobody waits for (progress written in the background): a
// store may then spend a round trip more to leave the next write less to do. The Nomad
// store moves the chunks its head carries out to variables of their own, so that the next
// write, which may be one a driver waits on before its requests, can carry what it changes.
func Unhurried(ctx context.Context) context.Context {
	return context.WithValue(ctx, unhurriedKey{}, true)
}

func unhurried(ctx context.Context) bool {
	v, _ := ctx.Value(unhurriedKey{}).(bool)
	return v
}
