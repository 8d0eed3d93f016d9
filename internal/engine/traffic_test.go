package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestTrafficWarnings(t *testing.T) {
	group := func(delay time.Duration, groupSvc, taskSvc *api.Service, taskDelay time.Duration) *api.TaskGroup {
		tg := api.NewTaskGroup("web", 3)
		if delay > 0 {
			tg.ShutdownDelay = &delay
		}
		if groupSvc != nil {
			tg.Services = []*api.Service{groupSvc}
		}
		task := api.NewTask("server", "raw_exec")
		task.ShutdownDelay = taskDelay
		if taskSvc != nil {
			task.Services = []*api.Service{taskSvc}
		}
		tg.AddTask(task)
		return tg
	}
	consul := &api.Service{Name: "web", PortLabel: "http"}
	nomad := &api.Service{Name: "web", PortLabel: "http", Provider: "nomad"}
	cases := []struct {
		name string
		tg   *api.TaskGroup
		spec restart.Spec
		want []string // substrings, one per warning, in order
	}{
		{"consul with a delay", group(2*time.Second, consul, nil, 0), restart.Spec{}, nil},
		{"consul without a delay", group(0, consul, nil, 0), restart.Spec{}, []string{`service "web" stopped with no delay`}},
		{"no services", group(0, nil, nil, 0), restart.Spec{}, nil},
		{"-no-shutdown-delay on a stop", group(2*time.Second, consul, nil, 0), restart.Spec{Reschedule: true, NoShutdownDelay: true}, []string{"stopped with no delay"}},
		{"-no-shutdown-delay in place (Nomad ignores it)", group(2*time.Second, consul, nil, 0), restart.Spec{NoShutdownDelay: true}, nil},
		{"nomad provider with a delay", group(2*time.Second, nomad, nil, 0), restart.Spec{}, []string{"of Nomad's provider"}},
		{"nomad provider without", group(0, nomad, nil, 0), restart.Spec{}, []string{"stopped with no delay", "of Nomad's provider"}},
		{"task service in place", group(0, nil, consul, 5*time.Second), restart.Spec{}, []string{"move the service to the group"}},
		{"task service on a stop with its delay", group(0, nil, consul, 5*time.Second), restart.Spec{Reschedule: true}, nil},
		{"consul without a delay names -drain", group(0, consul, nil, 0), restart.Spec{}, []string{"or use -drain 2s"}},
		{"consul without a delay, drained", group(0, consul, nil, 0), restart.Spec{Drain: 2 * time.Second}, nil},
		{"task service in place, drained", group(0, nil, consul, 5*time.Second), restart.Spec{Drain: 2 * time.Second}, nil},
		{"nomad provider without, drained (a drain cannot help it)", group(0, nomad, nil, 0), restart.Spec{Drain: 2 * time.Second}, []string{"stopped with no delay", "of Nomad's provider"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := api.NewServiceJob("web", "web", "global", 50)
			job.AddTaskGroup(tc.tg)
			got := TrafficWarnings(cluster.NewJobSpec(job), []string{"web"}, tc.spec)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], "group web: ") || !strings.Contains(got[i], w) {
					t.Errorf("warning %d %q, want it to name %q", i, got[i], w)
				}
			}
		})
	}
}

func TestTrafficWarningsNomadProviderDoesNotSuggestDrain(t *testing.T) {
	tg := api.NewTaskGroup("web", 1)
	tg.Services = []*api.Service{{Name: "web", PortLabel: "http", Provider: "nomad"}}
	tg.AddTask(api.NewTask("server", "raw_exec"))
	job := api.NewServiceJob("web", "web", "global", 50)
	job.AddTaskGroup(tg)
	for _, w := range TrafficWarnings(cluster.NewJobSpec(job), []string{"web"}, restart.Spec{}) {
		if strings.Contains(w, "-drain") {
			t.Errorf("warning %q suggests -drain for a service of Nomad's provider, which a drain cannot take out", w)
		}
	}
}

func TestDrainServicesAndExpectedDrain(t *testing.T) {
	delay := 3 * time.Second
	checked := func(provider string) *api.Service {
		return &api.Service{Name: "web-${NOMAD_ALLOC_INDEX}", PortLabel: "http", Provider: provider,
			Checks: []api.ServiceCheck{{Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}
	}
	mk := func(groupDelay *time.Duration, svcs ...*api.Service) *onchange.JobSpec {
		tg := api.NewTaskGroup("web", 2)
		tg.ShutdownDelay = groupDelay
		tg.Services = svcs
		task := api.NewTask("server", "raw_exec")
		task.Services = []*api.Service{{PortLabel: "admin"}} // unnamed: <job>-<group>-<task>
		tg.AddTask(task)
		job := api.NewServiceJob("shop", "shop", "global", 50)
		job.AddTaskGroup(tg)
		return cluster.NewJobSpec(job)
	}
	alloc := &restart.Alloc{ID: "0b9f9f0e-1111-2222-3333-444455556666", Name: "shop.web[1]", Group: "web", JobID: "shop", Namespace: "default"}
	cases := []struct {
		name     string
		job      *onchange.JobSpec
		spec     restart.Spec
		services []string
		expected time.Duration
	}{
		{"auto, group and task services without delay", mk(nil, checked("consul")), restart.Spec{Drain: 2 * time.Second, Health: restart.HealthAuto},
			[]string{"web-1", "shop-web-server"}, restart.DefaultDrain},
		{"auto with a group delay: only the task's (in place)", mk(&delay, checked("consul")), restart.Spec{Drain: 2 * time.Second, Health: restart.HealthAuto},
			[]string{"shop-web-server"}, restart.DefaultDrain},
		{"no drain planned", mk(nil, checked("consul")), restart.Spec{Health: restart.HealthAuto}, nil, restart.DefaultDrain},
		{"-health none: auto does not drain", mk(nil, checked("consul")), restart.Spec{Drain: time.Second, Health: restart.HealthNone},
			[]string{"web-1", "shop-web-server"}, 0},
		{"-drain given", mk(nil, checked("consul")), restart.Spec{Drain: 5 * time.Second, DrainGiven: true, Health: restart.HealthNone},
			[]string{"web-1", "shop-web-server"}, 5 * time.Second},
		{"nomad provider: only the task's consul service", mk(nil, checked("nomad")), restart.Spec{Drain: 2 * time.Second, Health: restart.HealthAuto},
			[]string{"shop-web-server"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := drainServices(tc.job, tc.spec, alloc)
			if strings.Join(got, ",") != strings.Join(tc.services, ",") {
				t.Errorf("drainServices = %q, want %q", got, tc.services)
			}
			plan := tc.spec
			plan.Drain = 0
			if tc.spec.DrainGiven {
				plan.Drain = tc.spec.Drain
			}
			if got := ExpectedDrain(tc.job, []string{"web"}, plan); got != tc.expected {
				t.Errorf("ExpectedDrain = %s, want %s", got, tc.expected)
			}
		})
	}
}

// TestDrainBalancerByTags: the drained services' tags name the balancer whose refresh the
// auto drain lasts (the longest of them), the operator's refresh replacing its default;
// a fixed drain shorter than it is warned about with the fixes; the agent's defaults fill
// only what the restart does not give.
func TestDrainBalancerByTags(t *testing.T) {
	tagged := func(tags ...string) *onchange.JobSpec {
		tg := api.NewTaskGroup("web", 2)
		tg.Services = []*api.Service{{Name: "web", PortLabel: "http", Provider: "consul", Tags: tags,
			Checks: []api.ServiceCheck{{Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
		tg.AddTask(api.NewTask("server", "raw_exec"))
		job := api.NewServiceJob("shop", "shop", "global", 50)
		job.AddTaskGroup(tg)
		return cluster.NewJobSpec(job)
	}
	auto := restart.Spec{Health: restart.HealthAuto}
	if got := ExpectedDrain(tagged("traefik.enable=true"), []string{"web"}, auto); got != 17*time.Second {
		t.Errorf("Traefik's tags: auto drains %s, want 17s", got)
	}
	fast := auto
	fast.BalancerRefresh = map[string]time.Duration{restart.BalancerTraefik: 5 * time.Second}
	if got := ExpectedDrain(tagged("traefik.enable=true"), []string{"web"}, fast); got != 7*time.Second {
		t.Errorf("Traefik refreshing every 5s: auto drains %s, want 7s", got)
	}
	if got := ExpectedDrain(tagged("urlprefix-/web"), []string{"web"}, auto); got != restart.DefaultDrain {
		t.Errorf("Fabio's tags: auto drains %s, want %s", got, restart.DefaultDrain)
	}
	short := restart.Spec{Health: restart.HealthAuto, Drain: 2 * time.Second, DrainGiven: true}
	w := TrafficWarnings(tagged("traefik.enable=true"), []string{"web"}, short)
	if len(w) != 1 || !strings.Contains(w[0], "-drain 2s is shorter than the refresh of the balancer that service \"web\"'s tags name, Traefik") ||
		!strings.Contains(w[0], "-drain auto (17s), -drain-until traefik=http://HOST:8080") || !strings.Contains(w[0], "-balancer-refresh traefik=DURATION") {
		t.Errorf("warnings %q, want one naming Traefik's refresh and the fixes", w)
	}
	short.DrainUntil = []restart.DrainEvidence{{Kind: restart.EvidenceTraefik, Address: "http://t:8080"}}
	if w := TrafficWarnings(tagged("traefik.enable=true"), []string{"web"}, short); len(w) != 0 {
		t.Errorf("with -drain-until, warnings %q, want none", w)
	}

	e := &Engine{bal: BalancersConfig{DrainUntil: []restart.DrainEvidence{{Kind: restart.EvidenceHAProxy, Address: "unix:/run/h.sock"}},
		Refresh: map[string]time.Duration{restart.BalancerTraefik: 5 * time.Second, restart.BalancerFabio: time.Second}}}
	own := restart.Spec{DrainUntil: short.DrainUntil, BalancerRefresh: map[string]time.Duration{restart.BalancerTraefik: 9 * time.Second}}
	e.applyBalancerDefaults(&own)
	if len(own.DrainUntil) != 1 || own.DrainUntil[0].Kind != restart.EvidenceTraefik || own.BalancerRefresh[restart.BalancerTraefik] != 9*time.Second || own.BalancerRefresh[restart.BalancerFabio] != time.Second {
		t.Errorf("the agent's defaults over the restart's own: %+v, %v", own.DrainUntil, own.BalancerRefresh)
	}
	var none restart.Spec
	e.applyBalancerDefaults(&none)
	if len(none.DrainUntil) != 1 || none.DrainUntil[0].Kind != restart.EvidenceHAProxy || none.BalancerRefresh[restart.BalancerTraefik] != 5*time.Second {
		t.Errorf("the agent's defaults on a restart without its own: %+v, %v", none.DrainUntil, none.BalancerRefresh)
	}
}
