package engine

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BalancersConfig wires the drain's evidence (-drain-until) and the defaults an agent
// gives the restarts it plans.
type BalancersConfig struct {
	// Dialer reads the balancers (the assembly's balancer.Dialer); nil: -drain-until is
	// refused at planning.
	Dialer BalancerDialer
	// DrainUntil is given to a restart planned without -drain-until (the agent's
	// -drain-until); Refresh fills the balancers' refreshes it does not give.
	DrainUntil []restart.DrainEvidence
	Refresh    map[string]time.Duration
}

// BalancerDialer gives the probe of one -drain-until. The engine makes no client itself:
// the assembly that read the flags hands this in (balancer.Dialer).
type BalancerDialer interface {
	Dial(ev restart.DrainEvidence) (BalancerProbe, error)
}

// BalancerProbe reads one balancer (balancer.Probe).
type BalancerProbe interface {
	Check(ctx context.Context) error
	Routes(ctx context.Context, t restart.DrainTarget) (bool, error)
}

// probeEvery is how often, in Nomad's time, a drain with evidence reads its balancers.
const probeEvery = 250 * time.Millisecond

// applyBalancerDefaults gives the spec the agent-wide -drain-until and balancer refreshes
// where the restart's own options give none.
func (e *Engine) applyBalancerDefaults(spec *restart.Spec) {
	if len(spec.DrainUntil) == 0 && len(e.bal.DrainUntil) > 0 {
		spec.DrainUntil = append([]restart.DrainEvidence(nil), e.bal.DrainUntil...)
	}
	for k, d := range e.bal.Refresh {
		if _, ok := spec.BalancerRefresh[k]; !ok {
			spec.BalancerRefresh = maps.Clone(spec.BalancerRefresh)
			if spec.BalancerRefresh == nil {
				spec.BalancerRefresh = map[string]time.Duration{}
			}
			spec.BalancerRefresh[k] = d
		}
	}
}

// checkBalancers reads every -drain-until once at planning: a balancer that does not
// answer is refused before anything restarts.
func (e *Engine) checkBalancers(ctx context.Context, evidence []restart.DrainEvidence) error {
	for _, ev := range evidence {
		if e.bal.Dialer == nil {
			return fmt.Errorf("-drain-until %s: this process cannot read load balancers; drop -drain-until", ev)
		}
		p, err := e.bal.Dialer.Dial(ev)
		if err == nil {
			err = p.Check(ctx)
		}
		if err != nil {
			return fmt.Errorf("-drain-until %s: %s; fix the address or drop -drain-until (nothing was restarted)", ev, oneLineErr(err))
		}
	}
	return nil
}

// drainBalancer is the balancer the tags of the groups' drained services name, the one
// that needs the longest drain when they name several.
func drainBalancer(job *onchange.JobSpec, groups []string, s restart.Spec) (restart.TaggedBalancer, string, bool) {
	var best restart.TaggedBalancer
	var service string
	found := false
	for _, name := range groups {
		g, ok := job.Group(name)
		if !ok {
			continue
		}
		for _, st := range stoppingServices(g, s) {
			if !st.undelayed || st.service.Provider == "nomad" {
				continue
			}
			if b, ok := restart.BalancerOfTags(st.service.Tags, s.BalancerRefresh); ok && (!found || b.Drain() > best.Drain()) {
				best, service, found = b, serviceName(st.service), true
			}
		}
	}
	return best, service, found
}

// drainProbe is one -drain-until dialed for a drain, or why it could not be.
type drainProbe struct {
	ev    restart.DrainEvidence
	probe BalancerProbe
	err   error
}

// waitDrain waits a drain: until every -drain-until shows every target dropped, at most
// d.spec.Drain (in Nomad's time). redrain registers the drain's checks again, every
// redrainEvery. It returns what ended the wait for the record: the evidence, or the
// balancers that still sent to an instance at the bound.
func (d *driver) waitDrain(ctx context.Context, targets []restart.DrainTarget, redrain func()) (ended string, still []string, err error) {
	scale := d.e.health.TimeScale
	if scale <= 0 {
		scale = 1
	}
	real := func(nomad time.Duration) time.Duration { return time.Duration(float64(nomad) / scale) }
	start := time.Now()
	deadline := start.Add(real(d.spec.Drain))
	var probes []drainProbe
	for _, ev := range d.spec.DrainUntil {
		p := drainProbe{ev: ev}
		if d.e.bal.Dialer == nil {
			p.err = fmt.Errorf("this driver cannot read load balancers")
		} else {
			p.probe, p.err = d.e.bal.Dialer.Dial(ev)
		}
		probes = append(probes, p)
	}
	tick := redrainEvery
	if len(probes) > 0 {
		tick = probeEvery
	}
	lastRedrain := start
	for {
		if len(probes) > 0 {
			// A balancer slow to answer holds the drain no longer than its bound.
			pctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
			still = d.stillRouting(pctx, probes, targets)
			cancel()
			if len(still) == 0 {
				names := make([]string, len(probes))
				for i, p := range probes {
					names[i] = p.ev.Name()
				}
				return fmt.Sprintf("%s no longer sent to %s after %s", strings.Join(names, " and "), targetsText(targets),
					time.Duration(float64(time.Since(start))*scale).Round(10*time.Millisecond)), nil, nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", still, ctx.Err()
		}
		if !cluster.Sleep(ctx, min(left, real(tick))) {
			return "", still, ctx.Err()
		}
		if time.Since(lastRedrain) >= real(redrainEvery) {
			redrain()
			lastRedrain = time.Now()
		}
	}
}

// stillRouting lists, for the record, each balancer that still sends to one of the
// targets (or could not be read: no evidence is no evidence).
func (d *driver) stillRouting(ctx context.Context, probes []drainProbe, targets []restart.DrainTarget) []string {
	var out []string
	for _, p := range probes {
		if p.err != nil {
			out = append(out, fmt.Sprintf("%s (%s)", p.ev.Name(), oneLineErr(p.err)))
			continue
		}
		for _, t := range targets {
			routes, err := p.probe.Routes(ctx, t)
			if err != nil {
				out = append(out, fmt.Sprintf("%s (%s)", p.ev.Name(), oneLineErr(err)))
				break
			}
			if routes {
				out = append(out, fmt.Sprintf("%s, to %s", p.ev.Name(), t.Address))
				break
			}
		}
	}
	return out
}

// drainTargets are the drained instances as the evidence looks for them.
func (d *driver) drainTargets(drained []health.Drained, names map[string]string) []restart.DrainTarget {
	var out []restart.DrainTarget
	for _, dr := range drained {
		for _, inst := range dr.Instances {
			out = append(out, restart.DrainTarget{Address: inst.Endpoint(), AllocID: dr.AllocID, AllocName: names[dr.AllocID],
				Service: inst.Service, Job: d.jobID, Namespace: d.jobNS})
		}
	}
	return out
}

func targetsText(targets []restart.DrainTarget) string {
	addrs := make([]string, 0, len(targets))
	for _, t := range targets {
		addrs = append(addrs, t.Address)
	}
	return strings.Join(addrs, ", ")
}
