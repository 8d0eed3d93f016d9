package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// undrainTimeout bounds the removal of a drain's checks, which runs after the restart's
// context may have ended (a cancel, a deadline): the node's agent removes them anyway
// within a minute or so.
const undrainTimeout = 10 * time.Second

// resolveDrain settles -drain at planning. Given (-drain <duration>), it is kept where a
// targeted group has a Consul service that Nomad stops with no delay, and Consul must
// answer before anything changes; not given (auto), the restart drains for
// restart.DefaultDrain where such a service exists and the health gate reads Consul
// already (its address is known to answer), and not with -health none, Nomad's own
// behaviour. Where no service needs it, the drain is 0.
func (e *Engine) resolveDrain(ctx context.Context, spec *restart.Spec, job *restart.Job, kept []*restart.Alloc, apiJob *cluster.JobSpec) error {
	if spec.Drain < 0 || spec.Drain > restart.MaxDrain {
		return fmt.Errorf("-drain %s is out of range: give a duration from 0 (no drain) to %s, such as 2s", spec.Drain, restart.MaxDrain)
	}
	asked := spec.Drain
	spec.Drain = 0
	if apiJob == nil {
		if spec.DrainGiven && asked > 0 {
			return fmt.Errorf("cannot read the services of job %q, so -drain cannot find what to drain: set -drain 0", job.ID)
		}
		return nil
	}
	if !drainNeeded(apiJob, targetGroups(kept), *spec) {
		return nil
	}
	if !spec.DrainGiven {
		if spec.ConsulAddress != "" && spec.Health != restart.HealthNone {
			spec.Drain = restart.DefaultDrain
		}
		return nil
	}
	if asked == 0 {
		return nil
	}
	if spec.ConsulAddress == "" {
		consul, err := health.NewConsul(e.health.Consul, e.nomadNow(), e.log)
		if err != nil {
			return fmt.Errorf("-drain needs Consul: %w; set -consul-address or CONSUL_HTTP_ADDR, or -drain 0", err)
		}
		if err := consul.Probe(ctx); err != nil {
			return fmt.Errorf("-drain needs Consul, but %w", drainAlternative(err))
		}
		spec.ConsulAddress = consul.Address()
	}
	spec.Drain = asked
	return nil
}

// drainAlternative rewords the Consul probe's way out for -drain.
func drainAlternative(err error) error {
	msg := strings.ReplaceAll(err.Error(), "or choose -health running", "or set -drain 0")
	return errors.New(msg)
}

// drainBefore takes allocation i's instances of the Consul services Nomad stops with no
// delay out of Consul's passing answers, and waits the drain, before its request is sent:
// a load balancer reading them stops sending to the instance before it stops. It returns
// the function that removes the drain's checks, to call once the request returned or
// failed. A drain that cannot be made is a warning, not a failure: the restart goes on as
// it would without -drain, and a denial turns the drain off for the rest of the restart.
// Its error is ctx's, when ctx ends during the wait.
func (d *driver) drainBefore(ctx context.Context, i int) (undo func(), err error) {
	undo = func() {}
	if d.spec.Drain <= 0 || d.drainOff.Load() {
		return undo, nil
	}
	p := d.progress(i)
	job, src, err := d.gateDeps(ctx)
	if err != nil || src.Consul == nil {
		if ctx.Err() != nil {
			return undo, ctx.Err()
		}
		d.drainWarning(p, fmt.Errorf("reading the job's services: %w", err))
		return undo, nil
	}
	services := drainServices(job, d.spec, &restart.Alloc{ID: p.ID, Name: p.Name, Group: p.Group, JobID: d.jobID, Namespace: d.jobNS})
	if len(services) == 0 {
		return undo, nil
	}
	reason := fmt.Sprintf("nomad-restart restart %s drains this instance for %s before restarting allocation %s", d.id, d.spec.Drain, shortAllocID(p.ID))
	drained, err := src.Consul.Drain(ctx, p.ID, services, reason)
	undo = func() {
		if len(drained.Instances) == 0 {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undrainTimeout)
		defer cancel()
		if err := src.Consul.Undrain(uctx, drained); err != nil {
			d.log.Warn("could not remove a drain's check; the node's Consul agent removes it within about a minute", "alloc", p.ID, "err", err)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return undo, ctx.Err()
		}
		if errors.Is(err, health.ErrDrainDenied) {
			d.drainOff.Store(true)
		}
		d.drainWarning(p, err)
		return undo, nil
	}
	if len(drained.Instances) == 0 {
		d.log.Debug("no Consul instance of the allocation to drain", "alloc", p.ID, "services", services)
		return undo, nil
	}
	d.stepProgress(func(r *restart.Record) {
		q := &r.Allocs[i]
		q.Waiting = "load balancers to drain the allocation"
		d.eventLocked(restart.Event{Type: restart.EventAllocDrain, AllocID: q.ID, Batch: q.Batch,
			Message: fmt.Sprintf("Draining allocation %q for %s: %s out of Consul's passing instances", q.ID, d.spec.Drain, servicesText(services))})
	})
	wait := d.spec.Drain
	if scale := d.e.health.TimeScale; scale > 0 {
		wait = time.Duration(float64(wait) / scale)
	}
	if !cluster.Sleep(ctx, wait) {
		return undo, ctx.Err()
	}
	return undo, nil
}

// drainWarning records, as a warning event, that an allocation is restarted undrained.
func (d *driver) drainWarning(p restart.AllocProgress, err error) {
	d.stepProgress(func(r *restart.Record) {
		d.eventLocked(restart.Event{Type: restart.EventWarning, AllocID: p.ID, Batch: p.Batch,
			Message: fmt.Sprintf("Warning: restarting allocation %q without a drain: %v", p.ID, err)})
	})
}

// drainServices lists the names, for allocation a, of its group's Consul services that
// the restart drains (stoppingService.drained); names holding variables nomad-restart
// cannot resolve are left out.
func drainServices(job *cluster.JobSpec, s restart.Spec, a *restart.Alloc) []string {
	g, ok := job.Group(a.Group)
	if !ok {
		return nil
	}
	var out []string
	for _, st := range stoppingServices(g, s) {
		if !st.drained(s) {
			continue
		}
		name := health.ServiceName(job, a, st.task, st.service)
		if !health.Unresolved(name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// shortAllocID is the first 8 characters of an allocation ID, as Nomad shows them.
func shortAllocID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// ExpectedDrain is the drain a restart of the groups with spec s would plan, were Consul
// to answer: for what is said without planning (watches -explain).
func ExpectedDrain(job *cluster.JobSpec, groups []string, s restart.Spec) time.Duration {
	switch {
	case !drainNeeded(job, groups, s):
		return 0
	case s.DrainGiven:
		return s.Drain
	case s.Health == restart.HealthNone || health.ResolveMode(s.Health, job, groups) != restart.HealthChecks:
		return 0
	}
	for _, g := range groups {
		if _, consul := health.Providers(health.GroupChecks(job, g)); consul {
			return restart.DefaultDrain
		}
	}
	return 0
}
