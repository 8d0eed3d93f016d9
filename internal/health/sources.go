package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Sources are the check sources of a restart. Consul is nil when no Consul is configured.
type Sources struct {
	Nomad  *NomadChecks
	Consul *Consul
	// TimeScale is how many seconds of Nomad's clock pass per real second: 1 (or 0) for
	// a real cluster, the simulation's scale for nomadsim. Poll intervals, which are in
	// Nomad's time, are divided by it.
	TimeScale float64
}

// Watch feeds the gate with every source it needs for the allocation (Gate.Providers),
// until ctx ends; it returns ctx's error, or at once an error saying which source is
// missing or which service name cannot be watched, or nil at once when the gate needs no
// checks. Run it in its own goroutine.
func (s Sources) Watch(ctx context.Context, g *Readiness, allocID string) error {
	providers := g.Providers()
	for _, p := range providers {
		switch {
		case p == ProviderNomad && s.Nomad == nil:
			return fmt.Errorf("allocation %s has Nomad service checks but no Nomad check source is set", shortID(allocID))
		case p == ProviderConsul && s.Consul == nil:
			return fmt.Errorf("allocation %s has Consul service checks but no Consul address is set: set -consul-address or CONSUL_HTTP_ADDR, or choose -health running", shortID(allocID))
		}
	}
	services := ConsulServices(g.cfg.Checks)
	for _, svc := range services {
		if Unresolved(svc) {
			return fmt.Errorf("allocation %s: the Consul service name %q holds a variable nomad-restart cannot resolve; choose -health running", shortID(allocID), svc)
		}
	}
	scale := s.TimeScale
	if scale <= 0 {
		scale = 1
	}
	var wg sync.WaitGroup
	errs := make([]error, len(providers))
	for i, p := range providers {
		wg.Go(func() {
			switch p {
			case ProviderNomad:
				errs[i] = s.Nomad.Watch(ctx, allocID, PollInterval(g.cfg.Checks), scale, g.ObserveChecks)
			case ProviderConsul:
				errs[i] = s.Consul.Watch(ctx, allocID, services, g.ObserveChecks)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}
