package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// Fleets keeps fleet records (many jobs restarted under one ID, each through a restart
// record of its own, its child). A fleet record lives in one namespace, its home, whatever
// namespaces its jobs are in. Every write is a check-and-set on the record's ModifyIndex.
type Fleets interface {
	// CreateFleet stores a new fleet and sets its CreateIndex and ModifyIndex; ErrExists
	// when a fleet of the same ID exists, *FleetTooLargeError when the record cannot fit.
	CreateFleet(ctx context.Context, f *fleet.Record) error
	// GetFleet reads a fleet by its full ID in its home namespace; ErrFleetNotFound if none.
	GetFleet(ctx context.Context, namespace, id string) (*fleet.Record, error)
	// FindFleet resolves an ID or unique prefix across the namespaces the store can see
	// (namespace "" or "*" for all); ErrFleetNotFound, or *AmbiguousIDError.
	FindFleet(ctx context.Context, namespace, prefix string) (*fleet.Record, error)
	// ListFleets returns the fleets of namespace ("" or "*" for all), newest CreateTime
	// first; active keeps only those whose status is not terminal.
	ListFleets(ctx context.Context, namespace string, active bool) ([]*fleet.Record, error)
	// UpdateFleet writes f if its ModifyIndex still matches the stored one, then sets f's
	// ModifyIndex and ModifyTime; on a mismatch it returns ErrConflict and changes nothing.
	UpdateFleet(ctx context.Context, f *fleet.Record) error
	// WatchFleetControl is WatchControl for a fleet: token 0 answers at once with the first
	// token; otherwise it blocks until an operator may have changed the fleet's Control
	// (RingFleet) and returns the fleet with the token to pass next. The driver's own
	// writes do not wake it.
	WatchFleetControl(ctx context.Context, namespace, id string, token uint64) (*fleet.Record, uint64, error)
	// WatchFleet blocks until the stored fleet's ModifyIndex is greater than afterIndex and
	// returns it (readers that follow everything: attach, the page).
	WatchFleet(ctx context.Context, namespace, id string, afterIndex uint64) (*fleet.Record, error)
	// RingFleet wakes the fleet's WatchFleetControl after an operator stored a change of
	// Control. MutateFleet calls it.
	RingFleet(ctx context.Context, namespace, id string) error
	// AcquireFleetLease takes the driver's lease on a fleet, or fails with ErrLeaseHeld.
	AcquireFleetLease(ctx context.Context, namespace, id, holder string) (Lease, error)
	// FleetLeaseHolder names the fleet lease's holder, "" when none holds it.
	FleetLeaseHolder(ctx context.Context, namespace, id string) (string, error)
	// PutFleetMember writes fleet id's member marker in namespace, a namespace of its jobs
	// other than its home: the consent, by a token that may write there, that the fleet
	// restarts m's jobs of that namespace (see fleet_member.go).
	PutFleetMember(ctx context.Context, namespace, id string, m Membership) error
	// FleetMember reads fleet id's member marker in namespace; ErrNoMember if none.
	FleetMember(ctx context.Context, namespace, id string) (Membership, error)
	// DeleteFleetMember removes fleet id's member marker in namespace; a missing one is no
	// error.
	DeleteFleetMember(ctx context.Context, namespace, id string) error
	// FleetMemberPath is the variable path of fleet id's member markers, for messages.
	FleetMemberPath(id string) string
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

// MutateFleet reads a fleet, applies change and writes it back, retrying on conflicts: how
// operators steer a fleet. A change of Control rings the fleet's driver (RingFleet).
func MutateFleet(ctx context.Context, s Fleets, namespace, id string, change func(*fleet.Record) error) (*fleet.Record, error) {
	var before fleet.Record
	rec, err := nomadvars.ReadChangeWrite(ctx, ErrConflict,
		func() (*fleet.Record, error) { return s.GetFleet(ctx, namespace, id) },
		func(rec *fleet.Record) (bool, error) { before.Control = rec.Control; return true, change(rec) },
		func(rec *fleet.Record) error { return s.UpdateFleet(ctx, rec) })
	if err != nil {
		return nil, err
	}
	if rec.Control != before.Control && !rec.Status.Terminal() {
		_ = s.RingFleet(ctx, rec.Namespace, rec.ID) // best effort, as Mutate's ring
	}
	return rec, nil
}
