package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Config wires a Driver.
type Config struct {
	Fleets store.Fleets
	// Restarts is the store of the children's records: the one Engine uses.
	Restarts store.Store
	Engine   *engine.Engine
	// Holder names this driver for humans (host:pid).
	Holder string
	Logger *slog.Logger // nil: discard
	// Now is the local clock for record timestamps; nil: time.Now.
	Now func() time.Time
	// DriveChildren drives each child in this process (the CLI). Without it the children
	// are left to whoever adopts detached restarts (the agent) and only followed.
	DriveChildren bool
	// ProbeEvery is how often a child or fleet held by another driver is probed for a free
	// lease; 0: from the store's lease timing (Records.LeaseExpiry), else 2 s.
	ProbeEvery time.Duration
	// Outbox hears that a fleet's record was stored with new events (and that a driver
	// took a fleet up), so that the notifications they call for are sent, off the
	// fleet's path; nil: none.
	Outbox Outbox
}

// Outbox is told of fleets whose records it may owe notifications for
// (notify/deliver's Outbox).
type Outbox interface {
	StoredFleet(namespace, id string)
}

// Driver drives and steers fleets.
type Driver struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
}

// New returns a Driver.
func New(cfg Config) *Driver {
	d := &Driver{cfg: cfg, log: cfg.Logger, now: cfg.Now}
	if d.log == nil {
		d.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d
}

// Event is one event of a fleet or of one of its children, for a follower (the CLI's
// output, attach).
type Event struct {
	Fleet string
	// Namespace and JobID name the child's job; both empty for an event of the fleet itself.
	Namespace string `json:",omitempty"`
	JobID     string `json:",omitempty"`
	// RestartID is the child's ID, for a child's event.
	RestartID string `json:",omitempty"`
	// Counts is the fleet's jobs by status as of the write that stored the event, for an
	// event of the fleet itself: what a progress line shows.
	Counts map[fleet.JobStatus]int `json:",omitempty"`
	restart.Event
}

// errLeaseLost ends a drive whose lease could not be renewed: another driver may now hold it.
var errLeaseLost = errors.New("the fleet's lease was lost: another driver may hold it now")

// Run takes the fleet's lease and drives the fleet until it ends, ctx ends (the fleet is left
// as stored and its children are left to be resumed: a detach), or the lease is lost. It
// resumes from whatever the record says. sink (may be nil) receives the fleet's events once
// stored, and the children's events as their drivers store them, one at a time.
func (d *Driver) Run(ctx context.Context, namespace, id string, sink func(Event)) (*fleet.Record, error) {
	lease, err := d.cfg.Fleets.AcquireLease(ctx, namespace, id, d.cfg.Holder)
	if err != nil {
		return nil, err
	}
	return d.run(ctx, namespace, id, lease, sink)
}

// CreateHeld records a new fleet with this driver's lease on it from its first write
// (Fleets.CreateLeased), for this process to drive with RunHeld: an agent, which takes up
// the fleets no process drives, never takes it up first.
func (d *Driver) CreateHeld(ctx context.Context, rec *fleet.Record) (store.Lease, error) {
	return d.cfg.Fleets.CreateLeased(ctx, rec, d.cfg.Holder)
}

// RunHeld is Run of a fleet whose lease CreateHeld took; it releases the lease when it
// returns.
func (d *Driver) RunHeld(ctx context.Context, rec *fleet.Record, lease store.Lease, sink func(Event)) (*fleet.Record, error) {
	return d.run(ctx, rec.Namespace, rec.ID, lease, sink)
}

// run drives the fleet under lease, and releases it when it returns.
func (d *Driver) run(ctx context.Context, namespace, id string, lease store.Lease, sink func(Event)) (*fleet.Record, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-lease.Lost():
			cancel(errLeaseLost)
		case <-ctx.Done():
		}
	}()
	defer func() {
		rctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer done()
		_ = lease.Release(rctx)
	}()
	r := newRun(d, namespace, id, sink)
	rec, err := r.drive(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, errLeaseLost) {
		return rec, fmt.Errorf("fleet %s: %w", short(id), errLeaseLost)
	}
	return rec, err
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
