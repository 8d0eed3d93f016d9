package engine

import (
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TrafficWarnings says, per group, where requests will be lost through a load
// balancer that follows the catalog, whatever the health gate does, and how to avoid it.
// What Nomad's client does (client/allocrunner/group_service_hook.go, PreTaskRestart and
// preKillLocked; taskrunner's service hook for task services):
//   - a group's services are taken out of the catalog, the group's shutdown_delay is
//     waited, and only then are the tasks stopped, or restarted in place (the services are
//     then registered again before the tasks start);
//   - a task's services are taken out when the task is killed, after the task's
//     shutdown_delay on a stop, with no delay on an in-place restart (Nomad issue 25289);
//   - a service of Nomad's own provider has no health in the catalog.
//
// So without a delay, a balancer keeps sending to the stopping instance until it next
// reads the catalog; and with Nomad's provider, it sends to the restarted instance from its
// registration until its process answers. -no-shutdown-delay skips the delays of a stop
// (-reschedule) and counts as none.
func TrafficWarnings(spec *onchange.JobSpec, groups []string, s restart.Spec) []string {
	var out []string
	for _, name := range groups {
		g, ok := spec.Group(name)
		if !ok {
			continue
		}
		var undelayed, nomad []string
		drainable := false // a drain would help one of the undelayed
		for _, st := range stoppingServices(g, s) {
			if st.undelayed && !st.drained(s) {
				undelayed = append(undelayed, serviceName(st.service))
				drainable = drainable || st.service.Provider != "nomad"
			}
			if st.service.Provider == "nomad" {
				nomad = append(nomad, serviceName(st.service))
			}
		}
		if len(undelayed) > 0 {
			fix := "set the group's shutdown_delay to at least your balancer's refresh interval (2s or more)"
			if len(g.Services) == 0 {
				fix = "move the service to the group and give the group a shutdown_delay of at least your balancer's refresh interval (a task's delay does not apply to an in-place restart)"
			}
			if drainable {
				drain := restart.DefaultDrain
				if b, _, ok := drainBalancer(spec, []string{name}, s); ok {
					drain = b.Drain()
				}
				fix += ", or use -drain " + drain.String()
			}
			out = append(out, fmt.Sprintf("group %s: %s stopped with no delay after leaving the catalog: a load balancer keeps sending requests to the instance until it next reads the catalog; %s",
				name, servicesText(undelayed), fix))
		}
		if w := shortDrainWarning(spec, name, s); w != "" {
			out = append(out, w)
		}
		if len(nomad) > 0 {
			out = append(out, fmt.Sprintf("group %s: %s of Nomad's provider: Nomad's catalog has no health, so a load balancer reading it sends requests to each restarted instance from its registration until its process answers; prefer Consul services with checks, read as passing only",
				name, servicesText(nomad)))
		}
	}
	return out
}

// shortDrainWarning says where a fixed -drain (without -drain-until) is shorter than the
// refresh of the balancer the group's services' tags name: the balancer keeps sending to
// the stopped instance for the rest of its refresh.
func shortDrainWarning(spec *onchange.JobSpec, group string, s restart.Spec) string {
	if !s.DrainGiven || s.Drain <= 0 || len(s.DrainUntil) > 0 {
		return ""
	}
	b, service, ok := drainBalancer(spec, []string{group}, s)
	if !ok || s.Drain >= b.Drain() {
		return ""
	}
	evidence := "prometheus:QUERY"
	if b.Key == restart.BalancerTraefik {
		evidence = "traefik=http://HOST:8080"
	}
	return fmt.Sprintf("group %s: -drain %s is shorter than the refresh of the balancer that service %q's tags name, %s: it may keep sending requests to a stopped instance for %s more; use -drain auto (%s), -drain-until %s to end the drain once it dropped the instance, or -balancer-refresh %s=DURATION if yours refreshes faster",
		group, s.Drain, service, b, b.Drain()-s.Drain, b.Drain(), evidence, b.Key)
}

// stoppingService is a service of a group as a restart stops it: the task that owns it
// ("" for the group's) and whether Nomad stops it with no delay after taking it out of
// the catalog.
type stoppingService struct {
	task      string
	service   onchange.ServiceSpec
	undelayed bool
}

// drained reports whether the restart drains the service before stopping it: a Consul
// service that Nomad stops with no delay, under -drain.
func (st stoppingService) drained(s restart.Spec) bool {
	return s.Drain > 0 && st.undelayed && st.service.Provider != "nomad"
}

// stoppingServices lists the group's services as a restart of the spec's kind stops them.
// -no-shutdown-delay skips the delays of a stop (-reschedule) and counts as none.
func stoppingServices(g onchange.GroupSpec, s restart.Spec) []stoppingService {
	var out []stoppingService
	add := func(task string, svcs []onchange.ServiceSpec, delay time.Duration) {
		for _, svc := range svcs {
			out = append(out, stoppingService{task: task, service: svc,
				undelayed: delay <= 0 || (s.Reschedule && s.NoShutdownDelay)})
		}
	}
	add("", g.Services, g.ShutdownDelay)
	for _, t := range g.Tasks {
		delay := t.ShutdownDelay
		if !s.Reschedule {
			delay = 0 // not applied on an in-place restart
		}
		add(t.Name, t.Services, delay)
	}
	return out
}

// drainNeeded reports whether any of the groups has a Consul service that Nomad stops with
// no delay: what a drain is for.
func drainNeeded(spec *onchange.JobSpec, groups []string, s restart.Spec) bool {
	for _, name := range groups {
		g, ok := spec.Group(name)
		if !ok {
			continue
		}
		for _, st := range stoppingServices(g, s) {
			if st.undelayed && st.service.Provider != "nomad" {
				return true
			}
		}
	}
	return false
}

func serviceName(s onchange.ServiceSpec) string {
	if s.Name == "" {
		return "(unnamed)"
	}
	return s.Name
}

func servicesText(names []string) string {
	if len(names) == 1 {
		return fmt.Sprintf("service %q", names[0])
	}
	return fmt.Sprintf("services %q", names)
}
