// Package store says what a store of restart and fleet records is, whatever keeps them: the
// Store, Fleets and Records interfaces, their errors, and the logic every store shares
// (IDs, filters, steering through Mutate, the cluster scope). The stores live beside it:
// nomadstore in Nomad Variables, localstore in files on this machine; storetest is the one
// suite every store passes.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Store keeps restart records. Every write is a check-and-set on the record's ModifyIndex,
// and a written record is never seen half-written.
type Store interface {
	// Records: Create also fails with *JobBusyError when a restart of the same job
	// (namespace and job ID) is not terminal, atomically: of two concurrent Creates for one
	// job, one fails. When Update makes a record's status terminal, its job is freed for a
	// new restart. WatchControl returns the record as WatchHead does.
	Records[*restart.Record]
	// List returns the records, newest CreateTime first, filtered.
	List(ctx context.Context, f Filter) ([]*restart.Record, error)
	// WatchHead is Watch for a reader that follows only the record's status and Control (a
	// driver watching for operators' intents): the record it returns may lack its Allocs
	// and Events, so a wake-up costs the same whatever the job's size.
	WatchHead(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error)
	// Kind names the store for humans: "nomad" or "local".
	Kind() string
}

// ControlByWatch is WatchControl for a Store whose Watch wakes on every write and costs no
// request to anyone (the local store): the token is the record's ModifyIndex.
func ControlByWatch(ctx context.Context, s Store, namespace, id string, token uint64) (*restart.Record, uint64, error) {
	rec, err := s.Watch(ctx, namespace, id, token)
	if err != nil {
		return nil, 0, err
	}
	return rec, rec.ModifyIndex, nil
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

// DefaultKeep is how many ended restarts of each job a store keeps by default: older ones
// are deleted when a new restart of the job is created.
const DefaultKeep = 20

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

type unhurriedKey struct{}

// Unhurried marks a write that nobody waits for (progress written in the background): a
// store may then spend a round trip more to leave the next write less to do. The Nomad
// store moves the chunks its head carries out to variables of their own, so that the next
// write, which may be one a driver waits on before its requests, can carry what it changes.
func Unhurried(ctx context.Context) context.Context {
	return context.WithValue(ctx, unhurriedKey{}, true)
}

// IsUnhurried reports whether ctx marks an Unhurried write.
func IsUnhurried(ctx context.Context) bool {
	v, _ := ctx.Value(unhurriedKey{}).(bool)
	return v
}
