package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// undrainTimeout bounds the removal of a drain's checks, which runs after the restart's
// context may have ended (a cancel, a deadline): the node's agent removes them anyway
// at its next full sync, within two minutes.
const undrainTimeout = 10 * time.Second

// resolveDrain settles -drain and -drain-until at planning. Given (-drain <duration>), the
// drain is kept where a targeted group has a Consul service that Nomad stops with no delay,
// and Consul must answer before anything changes; not given (auto), the restart drains
// where such a service exists and the health gate reads Consul already (its address is
// known to answer), and not with -health none, Nomad's own behaviour: for as long as the
// balancer the services' tags name needs (restart.BalancerOfTags), else for
// restart.DefaultDrain. With -drain-until, the drain is the most it waits for its evidence
// (under auto: the tagged balancer's, else restart.EvidenceDrainBound), Consul must answer,
// and so must every balancer named. Where no service needs it, the drain is 0.
func (e *Engine) resolveDrain(ctx context.Context, spec *restart.Spec, job *restart.Job, kept []*restart.Alloc, apiJob *onchange.JobSpec) error {
	if spec.Drain < 0 || spec.Drain > restart.MaxDrain {
		return fmt.Errorf("-drain %s is out of range: give a duration from 0 (no drain) to %s, such as 2s", spec.Drain, restart.MaxDrain)
	}
	// The restart's own -drain-until asks for a drain; the agent's default only says how
	// to end one.
	own := len(spec.DrainUntil) > 0
	e.applyBalancerDefaults(spec)
	asked := spec.Drain
	spec.Drain, spec.DrainBalancer = 0, ""
	evidence := len(spec.DrainUntil) > 0
	if apiJob == nil {
		if (spec.DrainGiven && asked > 0) || (own && !spec.DrainGiven) {
			return fmt.Errorf("cannot read the services of job %q, so -drain cannot find what to drain: set -drain 0", job.ID)
		}
		return nil
	}
	groups := targetGroups(kept)
	if !drainNeeded(apiJob, groups, *spec) {
		return nil
	}
	tagged, _, isTagged := drainBalancer(apiJob, groups, *spec)
	if isTagged {
		spec.DrainBalancer = tagged.String()
	}
	if !spec.DrainGiven {
		// auto drains where the gate reads Consul already, or where the restart's own
		// -drain-until asks for it.
		switch {
		case !own && (spec.ConsulAddress == "" || spec.Health == restart.HealthNone):
			return nil
		case evidence && isTagged:
			asked = tagged.Drain()
		case evidence:
			asked = restart.EvidenceDrainBound
		default:
			spec.Drain = restart.DefaultDrain
			if isTagged {
				spec.Drain = tagged.Drain()
			}
			return nil
		}
	}
	if asked == 0 {
		return nil
	}
	if spec.ConsulAddress == "" {
		consul, err := e.consul("", e.log, true)
		if err != nil {
			return fmt.Errorf("-drain needs Consul: %w; set -consul-address or CONSUL_HTTP_ADDR, or -drain 0", err)
		}
		if err := consul.Probe(ctx); err != nil {
			return fmt.Errorf("-drain needs Consul, but %w", drainAlternative(err))
		}
		spec.ConsulAddress = consul.Address()
	}
	if evidence {
		if err := e.checkBalancers(ctx, spec.DrainUntil); err != nil {
			return err
		}
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
// delay out of Consul's passing answers, and waits the drain, before its request is sent
// (drainAllocs). It returns the function that removes the drain's checks.
func (d *driver) drainBefore(ctx context.Context, i int) (undo func(), err error) {
	p := d.progress(i)
	a := &restart.Alloc{ID: p.ID, Name: p.Name, Group: p.Group, JobID: d.jobID, Namespace: d.jobNS}
	return d.drainAllocs(ctx, []*restart.Alloc{a}, p.Batch, func(r *restart.Record) {
		r.Allocs[i].Waiting = "load balancers to drain the allocation"
	})
}

// allocDrain is the drain (-drain) of one allocation whose request is being sent: made
// before the first request that goes out, and taken off at every exit of the sending loop
// (done) unless a stop went through (keep: Nomad's client deregisters the instance).
type allocDrain struct {
	d    *driver
	i    int
	undo func()
}

// before drains the allocation, once.
func (a *allocDrain) before(ctx context.Context) error {
	if a.undo != nil {
		return nil
	}
	var err error
	a.undo, err = a.d.drainBefore(ctx, a.i)
	return err
}

// keep leaves the drain's checks for Nomad's client to remove with the instance.
func (a *allocDrain) keep() { a.undo = nil }

// done takes the drain's checks off, if any are on.
func (a *allocDrain) done() {
	if a.undo != nil {
		a.undo()
	}
}

// drainAllocs takes the allocations' instances of the Consul services Nomad stops with no
// delay out of Consul's passing answers, and waits the drain once for all: a load balancer
// reading them stops sending to the instances before they stop. mark, when not nil, is
// applied to the record with the drain's events. It returns the function that removes the
// drain's checks: once an in-place restart returned (Nomad's client registered the
// instance anew by then, so it is a no-op unless the client did not), or when a stop
// failed; after a stop that went through, Nomad's client deregisters the instance with its
// checks, and taking the check off before would send requests back to a stopping
// instance. A drain that cannot be made is a warning, not a failure: the restart goes on
// as it would without -drain, and a denial turns the drain off for the rest of the
// restart. Its error is ctx's, when ctx ends during the wait.
func (d *driver) drainAllocs(ctx context.Context, allocs []*restart.Alloc, batch int, mark func(r *restart.Record)) (undo func(), err error) {
	undo = func() {}
	if d.spec.Drain <= 0 || d.drainOff.Load() || len(allocs) == 0 {
		return undo, nil
	}
	job, src, err := d.readinessDeps(ctx)
	if err != nil || src.Consul == nil {
		if ctx.Err() != nil {
			return undo, ctx.Err()
		}
		d.drainWarning(allocs, batch, fmt.Errorf("reading the job's services: %w", err))
		return undo, nil
	}
	var drained []health.Drained
	undo = func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undrainTimeout)
		defer cancel()
		for _, dr := range drained {
			if err := src.Consul.Undrain(uctx, dr); err != nil {
				d.log.Warn("could not remove a drain's check; the node's Consul agent removes it at its next full sync, within two minutes", "alloc", dr.AllocID, "err", err)
			}
		}
	}
	var events []restart.Event
	for _, a := range allocs {
		services := drainServices(job, d.spec, a)
		if len(services) == 0 {
			continue
		}
		dr, err := src.Consul.Drain(ctx, a.ID, services, d.drainReason(a.ID))
		drained = append(drained, dr)
		if err != nil {
			if ctx.Err() != nil {
				return undo, ctx.Err()
			}
			if errors.Is(err, health.ErrDrainDenied) {
				d.drainOff.Store(true)
				d.drainWarning(allocs, batch, err)
				return undo, nil
			}
			d.drainWarning([]*restart.Alloc{a}, batch, err)
			continue
		}
		if len(dr.Instances) == 0 {
			d.log.Debug("no Consul instance of the allocation to drain", "alloc", a.ID, "services", services)
			continue
		}
		events = append(events, restart.Event{Type: restart.EventAllocDrain, AllocID: a.ID, Batch: batch,
			Message: fmt.Sprintf("Draining allocation %q %s: %s out of Consul's passing instances", a.ID, d.spec.DrainText(), servicesText(services))})
	}
	if len(events) == 0 {
		return undo, nil
	}
	d.stepProgress(func(r *restart.Record) {
		if mark != nil {
			mark(r)
		}
		for _, ev := range events {
			d.eventLocked(ev)
		}
	})
	// The node's agent may remove the checks at its next full sync, a few seconds after
	// the registration at worst: they are registered again through the wait, and once
	// more before the request.
	names := make(map[string]string, len(allocs))
	for _, a := range allocs {
		names[a.ID] = a.Name
	}
	ended, still, err := d.waitDrain(ctx, d.drainTargets(drained, names), func() {
		for _, dr := range drained {
			if err := src.Consul.Redrain(ctx, dr, d.drainReason(dr.AllocID)); err != nil && ctx.Err() == nil {
				d.log.Warn("could not register a drain's check again", "alloc", dr.AllocID, "err", err)
			}
		}
	})
	if err != nil {
		return undo, err
	}
	d.drainEnded(allocs, batch, ended, still)
	return undo, nil
}

// drainEnded records what ended a drain with evidence (-drain-until): the evidence, or,
// at the drain's bound, a warning naming the balancers that still sent to an instance.
func (d *driver) drainEnded(allocs []*restart.Alloc, batch int, ended string, still []string) {
	if len(d.spec.DrainUntil) == 0 {
		return
	}
	ev := restart.Event{Type: restart.EventAllocDrain, Batch: batch, Message: "Drained: " + ended}
	if ended == "" {
		ev = restart.Event{Type: restart.EventWarning, Batch: batch,
			Message: fmt.Sprintf("Warning: the drain reached its bound of %s while %s; restarting anyway (raise -drain, or check the -drain-until address)", d.spec.Drain, strings.Join(still, "; "))}
	}
	if len(allocs) == 1 {
		ev.AllocID = allocs[0].ID
	}
	d.stepProgress(func(r *restart.Record) { d.eventLocked(ev) })
}

// drainReason is the output of the drain's check on an allocation's instances: who
// registered it and why, for an operator who finds it in Consul.
func (d *driver) drainReason(allocID string) string {
	return fmt.Sprintf("nomad-restart restart %s drains this instance for %s before it stops allocation %s", d.id, d.spec.Drain, short(allocID))
}

// redrainEvery is how often, in Nomad's time, a drain registers its checks again during
// its wait: a check the node's agent removed at a full sync is back before a balancer that
// reads every second has likely refreshed.
const redrainEvery = 500 * time.Millisecond

// drainWarning records, as a warning event, that allocations are restarted or stopped
// undrained.
func (d *driver) drainWarning(allocs []*restart.Alloc, batch int, err error) {
	what := fmt.Sprintf("allocation %q", allocs[0].ID)
	if len(allocs) > 1 {
		what = fmt.Sprintf("%d allocations", len(allocs))
	}
	d.stepProgress(func(r *restart.Record) {
		ev := restart.Event{Type: restart.EventWarning, Batch: batch,
			Message: fmt.Sprintf("Warning: %s stopped without a drain, so load balancers may keep sending requests until their next refresh: %v", what, err)}
		if len(allocs) == 1 {
			ev.AllocID = allocs[0].ID
		}
		d.eventLocked(ev)
	})
}

// drainServices lists the names, for allocation a, of its group's Consul services that
// the restart drains (stoppingService.drained); names holding variables nomad-restart
// cannot resolve are left out.
func drainServices(job *onchange.JobSpec, s restart.Spec, a *restart.Alloc) []string {
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

// ExpectedDrain is the drain a restart of the groups with spec s would plan, were Consul
// to answer: for what is said without planning (watches -explain).
func ExpectedDrain(job *onchange.JobSpec, groups []string, s restart.Spec) time.Duration {
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
			if b, _, ok := drainBalancer(job, groups, s); ok {
				return b.Drain()
			}
			return restart.DefaultDrain
		}
	}
	return 0
}

// drainScaleDown drains, before a scale-down of group to count, the allocations Nomad's
// scheduler will stop: the group's live allocations with the highest name indexes
// (scheduler/reconciler's computeStop: nameIndex.Highest). A surge's allocation is one of
// them. It returns the function that removes the drain's checks, for a scale-down that
// failed.
func (d *driver) drainScaleDown(ctx context.Context, group string, count int) (undo func(), err error) {
	if d.spec.Drain <= 0 || d.drainOff.Load() {
		return func() {}, nil
	}
	allocs, _, err := d.e.cluster.JobAllocations(ctx, d.jobNS, d.jobID)
	if err != nil {
		if ctx.Err() != nil {
			return func() {}, ctx.Err()
		}
		d.log.Warn("cannot read the allocations a scale-down stops; they are stopped undrained", "group", group, "err", err)
		return func() {}, nil
	}
	return d.drainAllocs(ctx, highestIndexed(allocs, group, count), 0, nil)
}

// highestIndexed lists the group's live allocations beyond count, highest name index
// first: those a scale-down to count stops.
func highestIndexed(allocs []*restart.Alloc, group string, count int) []*restart.Alloc {
	var live []*restart.Alloc
	for _, a := range allocs {
		terminal := a.ClientStatus == restart.ClientComplete || a.ClientStatus == restart.ClientFailed || a.ClientStatus == restart.ClientLost
		if a.Group == group && a.DesiredStatus == restart.DesiredRun && !terminal && a.NextAllocation == "" {
			live = append(live, a)
		}
	}
	if len(live) <= count {
		return nil
	}
	slices.SortStableFunc(live, func(x, y *restart.Alloc) int { return nameIndex(y.Name) - nameIndex(x.Name) })
	return live[:len(live)-count]
}

// nameIndex is the index in an allocation's name (<job>.<group>[<index>]); -1 when the
// name has none.
func nameIndex(name string) int {
	i := strings.LastIndexByte(name, '[')
	if i < 0 || !strings.HasSuffix(name, "]") {
		return -1
	}
	n, err := strconv.Atoi(name[i+1 : len(name)-1])
	if err != nil {
		return -1
	}
	return n
}
