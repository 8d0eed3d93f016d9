package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// HealthConfig wires the checks gate (-health checks and auto). Every field is optional.
type HealthConfig struct {
	// JobSpec reads the job's full specification (its services and checks); nil: the
	// Cluster's.
	JobSpec func(ctx context.Context, namespace, jobID string) (*onchange.JobSpec, error)
	// Checks reads Nomad-native check results; nil: the Cluster when it can.
	Checks cluster.CheckReader
	// Consul gives the Consul check sources (the assembly's health.ConsulDialer, made from
	// the flags and the environment); nil: no Consul, so Consul checks cannot be read.
	Consul ConsulDialer
	// Clock is Nomad's clock, on which min-healthy times and deadlines are measured; nil:
	// an estimate from the Nomad timestamps the driver reads (health.OffsetClock). Give a
	// simulation's clock here, as its clock does not run at the local rate.
	Clock health.Clock
	// Estimate, when Clock is nil, is the estimate to use, which others may feed too (the
	// Nomad client's answers' times: cluster.ClientConfig.ObserveTime); nil: one of the
	// engine's own.
	Estimate *health.OffsetClock
	// TimeScale is how many seconds of Nomad's clock pass per real second (0: 1).
	TimeScale float64
}

// ConsulDialer gives the engine Consul at an address: where a restart's planner reached it,
// or "" for the configured one (health.ConsulDialer; see its Dial). The engine makes no
// client itself: the assembly that read the flags and the environment hands this in.
type ConsulDialer interface {
	Dial(address string, clock health.Clock, log *slog.Logger, pooled bool) (*health.Consul, error)
}

// errNoConsul is what asking for Consul gives an engine that was handed none.
var errNoConsul = errors.New("no Consul is configured")

// consul is the Consul check source at address (see ConsulDialer), stamping its snapshots
// with Nomad's clock. Unpooled (pooled false): for a source dropped with its batch.
func (e *Engine) consul(address string, log *slog.Logger, pooled bool) (*health.Consul, error) {
	if e.health.Consul == nil {
		return nil, errNoConsul
	}
	return e.health.Consul.Dial(address, e.nomadNow(), log, pooled)
}

// jobSpec reads the full job, for its services and update blocks (the cluster retries
// transient failures).
func (e *Engine) jobSpec(ctx context.Context, ns, id string) (*onchange.JobSpec, error) {
	if e.health.JobSpec != nil {
		return e.health.JobSpec(ctx, ns, id)
	}
	spec, err := e.cluster.JobSpec(ctx, ns, id)
	if errors.Is(err, cluster.ErrNotSupported) {
		return nil, errors.New("this cluster cannot read job specifications, so service checks are unknown; choose -health running")
	}
	return spec, err
}

func (e *Engine) checkReader() cluster.CheckReader {
	if e.health.Checks != nil {
		return e.health.Checks
	}
	return e.cluster
}

// nomadNow is Nomad's current time, or the estimate of it.
func (e *Engine) nomadNow() health.Clock {
	if e.health.Clock != nil {
		return e.health.Clock
	}
	return e.offset.Now
}

// observeTimes feeds Nomad's timestamps of an allocation to the clock estimate, so that
// check snapshots stamped with it never read as older than the tasks' start.
func (e *Engine) observeTimes(a *restart.Alloc) {
	if e.health.Clock != nil || a == nil {
		return
	}
	for _, ts := range a.Tasks {
		e.offset.Observe(ts.StartedAt)
		for _, ev := range ts.Events {
			e.offset.Observe(ev.Time)
		}
	}
}

// resolveHealth turns -health auto into checks or running from the targeted groups'
// services, resolves each group's times from its update block where the flags did not set
// them, and, when Consul checks count, makes sure Consul answers before anything changes.
// apiJob is the job's full specification as planFacts read it, err why it could not be.
func (e *Engine) resolveHealth(ctx context.Context, spec *restart.Spec, job *restart.Job, kept []*restart.Alloc, apiJob *onchange.JobSpec, err error) error {
	if spec.Health == restart.HealthNone {
		return nil
	}
	if err != nil {
		switch spec.Health {
		case restart.HealthAuto:
			e.log.Warn("cannot read the job's checks; waiting for the tasks to run only", "job", job.ID, "err", err)
			spec.Health = restart.HealthRunning
			return nil
		case restart.HealthRunning:
			e.log.Warn("cannot read the job's update block; the healthy deadline is the flag's or Nomad's default", "job", job.ID, "err", err)
			return nil
		}
		return fmt.Errorf("reading the checks of job %q: %w", job.ID, err)
	}
	groups := targetGroups(kept)
	mode := restart.HealthRunning
	if spec.Health != restart.HealthRunning {
		mode = health.ResolveMode(spec.Health, apiJob, groups)
	}
	if mode != restart.HealthChecks {
		spec.Health = restart.HealthRunning
		health.RunningTimes(spec, apiJob, groups)
		return nil
	}
	spec.Health = restart.HealthChecks
	spec.GroupHealth = map[string]restart.GroupHealth{}
	for _, g := range groups {
		minH, deadline, _ := health.Defaults(apiJob, g)
		if spec.MinHealthyTimeGiven {
			minH = spec.MinHealthyTime
		}
		if spec.HealthyDeadlineGiven {
			deadline = spec.HealthyDeadline
		}
		if minH >= deadline {
			return fmt.Errorf("group %q: min healthy time %s is not shorter than the healthy deadline %s; set -min-healthy-time or -healthy-deadline", g, minH, deadline)
		}
		spec.GroupHealth[g] = restart.GroupHealth{MinHealthyTime: minH, HealthyDeadline: deadline}
	}
	var services []string
	seen := map[string]bool{}
	for _, a := range kept {
		for _, s := range health.ConsulServices(health.AllocChecks(apiJob, a)) {
			if !seen[s] && !health.Unresolved(s) {
				seen[s] = true
				services = append(services, s)
			}
		}
	}
	needConsul := false
	for _, g := range groups {
		if _, c := health.Providers(health.GroupChecks(apiJob, g)); c {
			needConsul = true
		}
	}
	if !needConsul {
		return nil
	}
	consul, err := e.consul("", e.log, true)
	if err != nil {
		return fmt.Errorf("job %q has Consul checks: %w; set -consul-address or CONSUL_HTTP_ADDR, or choose -health running", job.ID, err)
	}
	if err := consul.Probe(ctx, services...); err != nil {
		return fmt.Errorf("job %q has Consul checks, but %w", job.ID, err)
	}
	spec.ConsulAddress = consul.Address()
	return nil
}

func targetGroups(kept []*restart.Alloc) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range kept {
		if !seen[a.Group] {
			seen[a.Group] = true
			out = append(out, a.Group)
		}
	}
	sort.Strings(out)
	return out
}

// readinessDeps are what a driver's readiness gates need, read on first use and kept for
// the driver's life once read. A read that failed because its caller's context ended (a
// gate canceled when its batch failed, the per-allocation deadline) or that failed
// transiently is not kept: the next gate reads again, rather than failing on an error that
// was only its neighbour's. Concurrent gates share one read in flight; each waits for it
// only as long as its own context lasts.
type readinessDeps struct {
	mu      sync.Mutex
	loaded  bool          // job, sources and err are final
	loading chan struct{} // closed when the read in flight ends; nil when none runs
	job     *onchange.JobSpec
	sources health.Sources
	err     error
}

func (d *driver) readinessDeps(ctx context.Context) (*onchange.JobSpec, health.Sources, error) {
	g := &d.readiness
	for {
		g.mu.Lock()
		if g.loaded {
			job, src, err := g.job, g.sources, g.err
			g.mu.Unlock()
			return job, src, err
		}
		if wait := g.loading; wait != nil {
			g.mu.Unlock()
			select {
			case <-wait:
				continue // loaded, or failed in a way worth reading again
			case <-ctx.Done():
				return nil, health.Sources{}, fmt.Errorf("reading the checks of job %q: %w", d.jobID, ctx.Err())
			}
		}
		done := make(chan struct{})
		g.loading = done
		g.mu.Unlock()

		job, src, err := d.loadReadinessDeps(ctx)
		g.mu.Lock()
		if err == nil || keepReadinessErr(ctx, err) {
			g.loaded, g.job, g.sources, g.err = true, job, src, err
		}
		g.loading = nil
		close(done)
		g.mu.Unlock()
		return job, src, err
	}
}

// keepReadinessErr reports whether a failed read of the gates' dependencies is final for the
// driver: not when the caller's context ended (its own deadline, or a sibling's failure),
// nor when the failure passes (Nomad unavailable, no leader).
func keepReadinessErr(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return !cluster.IsTransient(err)
}

// loadReadinessDeps reads the job's specification and builds the check sources.
func (d *driver) loadReadinessDeps(ctx context.Context) (*onchange.JobSpec, health.Sources, error) {
	job, err := d.e.jobSpec(ctx, d.jobNS, d.jobID)
	if err != nil {
		return nil, health.Sources{}, fmt.Errorf("reading the checks of job %q: %w", d.jobID, err)
	}
	src := health.Sources{TimeScale: d.e.health.TimeScale}
	if r := d.e.checkReader(); r != nil {
		src.Nomad = health.NewNomadChecks(r, d.e.nomadNow(), d.log)
	}
	if d.e.health.Consul == nil {
		return job, src, nil // Sources.Watch says Consul is missing, if a check needs it
	}
	// Where planning reached Consul, unless this driver was told otherwise.
	c, err := d.e.consul(d.spec.ConsulAddress, d.log, true)
	if err != nil {
		return nil, health.Sources{}, err
	}
	src.Consul = c
	return job, src, nil
}
