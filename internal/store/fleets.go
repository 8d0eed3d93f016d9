package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
)

// Fleets keeps fleet records (many jobs restarted under one ID, each through a restart
// record of its own, its child). A fleet record lives in one namespace, its home, whatever
// namespaces its jobs are in. Every write is a check-and-set on the record's ModifyIndex.
type Fleets interface {
	// Records: Create also fails with *FleetTooLargeError when the record cannot fit; the
	// not-found error is ErrFleetNotFound.
	Records[*fleet.Record]
	// List returns the fleets of namespace ("" or "*" for all), newest CreateTime first;
	// active keeps only those whose status is not terminal.
	List(ctx context.Context, namespace string, active bool) ([]*fleet.Record, error)
	// PutMember writes fleet id's member marker in namespace, a namespace of its jobs
	// other than its home: the consent, by a token that may write there, that the fleet
	// restarts m's jobs of that namespace (see nomadstore/members.go).
	PutMember(ctx context.Context, namespace, id string, m Membership) error
	// Member reads fleet id's member marker in namespace; ErrNoMember if none.
	Member(ctx context.Context, namespace, id string) (Membership, error)
	// DeleteMember removes fleet id's member marker in namespace; a missing one is no
	// error.
	DeleteMember(ctx context.Context, namespace, id string) error
	// MemberPath is the variable path of fleet id's member markers, for messages.
	MemberPath(id string) string
	// WatchList blocks until a fleet of namespace ("" or "*" for all) changed after
	// afterIndex, or wait passed, and returns the index to watch from next (0 answers at
	// once). It is tried once: the caller's watch paces and retries (cluster.Watch).
	WatchList(ctx context.Context, namespace string, afterIndex uint64, wait time.Duration) (uint64, error)
}

// ErrFleetNotFound says no fleet has the ID (or prefix) asked for.
var ErrFleetNotFound = errors.New("fleet not found")

// FleetTooLargeError says a fleet's record would not fit Nomad's limit on one variable.
type FleetTooLargeError struct {
	Jobs, Bytes, Limit int
}

func (e *FleetTooLargeError) Error() string {
	return fmt.Sprintf("a fleet of %d jobs needs a record of %d bytes, over the %d a Nomad variable holds; narrow -jobs and restart the rest as a second fleet", e.Jobs, e.Bytes, e.Limit)
}
