package cli

import (
	"context"
	"log/slog"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// restarter is what the commands need of the engine (internal/engine's *Engine, through
// a thin adapter in wire.go). Keeping it an interface lets the commands be read, and tested,
// without a cluster.
type restarter interface {
	Plan(ctx context.Context, namespace, job string, spec restart.Spec) (*planned, error)
	// Create records the restart for another driver (-detach: an agent, or `resume`).
	Create(ctx context.Context, rec *restart.Record) error
	// CreateHeld records the restart with this process's lease on it from its first write,
	// for this process to drive: no agent takes it up first.
	CreateHeld(ctx context.Context, rec *restart.Record) (held, error)
	Drive(ctx context.Context, namespace, id string, sink func(restart.Event)) (*restart.Record, error)
	Pause(ctx context.Context, namespace, id, by string) (*restart.Record, error)
	Resume(ctx context.Context, namespace, id, by string) (*restart.Record, error)
	Cancel(ctx context.Context, namespace, id, by string) (*restart.Record, error)
	Answer(ctx context.Context, namespace, id, answer, by string) (*restart.Record, error)
}

// held is a restart this process created with its lease (restarter.CreateHeld).
type held interface {
	// Drive drives it here, as restarter.Drive, and gives the lease up when it returns.
	Drive(ctx context.Context, sink func(restart.Event)) (*restart.Record, error)
}

// driveFunc drives a restart here: restarter.Drive of one restart, or held.Drive.
type driveFunc func(ctx context.Context, sink func(restart.Event)) (*restart.Record, error)

// planned is the engine's plan: the pending record, the job, and the allocations left out.
type planned struct {
	Record  *restart.Record
	Job     *restart.Job
	Skipped []engine.Skip
	// Gates are the metric gates' queries asked once at planning, as the first batch's
	// would be now.
	Gates []gate.Measurement
	// Warnings say where requests will be lost whatever the restart does, and how to
	// avoid it (also in the record's events).
	Warnings []string
}

// backend builds sessions from Nomad's client options.
type backend interface {
	open(cf clientFlags, logger *slog.Logger, holder string) (session, error)
}

// session is one connection to a Nomad cluster and the stores next to it.
type session interface {
	// address is the Nomad address in use, for messages.
	address() string
	// reachable checks that Nomad answers.
	reachable(ctx context.Context) error
	// probeNomad tells whether restart records of job may be written to Nomad Variables in
	// namespace, without writing anything.
	probeNomad(ctx context.Context, namespace, job string) error
	nomadStore() store.Store
	localStore() (store.Store, error)
	engine(st store.Store) restarter
	// fleetStore, jobLister, schedules and fleetDriver are the fleets' and schedules' parts,
	// which live in Nomad Variables: nil (fleetStore) where the session has none.
	fleetStore() store.Fleets
	jobLister() fleetrun.Lister
	schedules() *schedule.Store
	// fleetDriver is a driver whose engine holds up to maxFeeds event streams at once and,
	// with driveChildren, drives the fleet's children in this process.
	fleetDriver(maxFeeds int, driveChildren bool) *fleetrun.Driver
	// notifySinks resolves and builds the sinks setup names (reading nomadvar:// URLs);
	// startOutbox starts sending what the records of st owe them, for as long as ctx
	// lives, and hands the outbox to the session's engines (nil without sinks).
	notifySinks(ctx context.Context, setup notifySetup) (map[string]deliver.Sink, error)
	startOutbox(ctx context.Context, setup notifySetup, sinks map[string]deliver.Sink, st store.Store) *deliver.Outbox
	// jobCluster is the session's Nomad, through which jobs, their allocations and the
	// allocations' files are read (stale, run -stale-only, watches): nil where the session
	// has no Nomad client.
	jobCluster() *cluster.Nomad
	// sourceHub is a hub of sourcewatch on the session's Nomad, through which watches reads
	// the sources of config-change rollouts as the agent does: nil where jobCluster is.
	sourceHub(sourcewatch.Options) *sourcewatch.Hub
}
