package health

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func dur(d time.Duration) *time.Duration { return &d }
func str(s string) *string               { return &s }

func TestDefaults(t *testing.T) {
	withChecks := func() *api.TaskGroup {
		tg := api.NewTaskGroup("web", 1)
		tg.Services = []*api.Service{{Name: "web", Provider: "nomad", Checks: []api.ServiceCheck{{Name: "http", Type: "http"}}}}
		return tg
	}
	tests := []struct {
		name                  string
		jobUpdate             *api.UpdateStrategy
		group                 *api.TaskGroup
		wantMin, wantDeadline time.Duration
		wantMode              restart.HealthMode
	}{
		{"nomad defaults, no checks", nil, api.NewTaskGroup("web", 1), 10 * time.Second, 5 * time.Minute, restart.HealthRunning},
		{"group checks", nil, withChecks(), 10 * time.Second, 5 * time.Minute, restart.HealthChecks},
		{"job update block", &api.UpdateStrategy{MinHealthyTime: dur(3 * time.Second), HealthyDeadline: dur(time.Minute)}, api.NewTaskGroup("web", 1),
			3 * time.Second, time.Minute, restart.HealthRunning},
		{"group update wins over job's", &api.UpdateStrategy{MinHealthyTime: dur(3 * time.Second), HealthyDeadline: dur(time.Minute)},
			func() *api.TaskGroup {
				tg := withChecks()
				tg.Update = &api.UpdateStrategy{MinHealthyTime: dur(20 * time.Second)}
				return tg
			}(), 20 * time.Second, time.Minute, restart.HealthChecks},
		{"task_states turns checks off", nil, func() *api.TaskGroup {
			tg := withChecks()
			tg.Update = &api.UpdateStrategy{HealthCheck: str("task_states")}
			return tg
		}(), 10 * time.Second, 5 * time.Minute, restart.HealthRunning},
		{"zero min healthy time is kept", nil, func() *api.TaskGroup {
			tg := api.NewTaskGroup("web", 1)
			tg.Update = &api.UpdateStrategy{MinHealthyTime: dur(0)}
			return tg
		}(), 0, 5 * time.Minute, restart.HealthRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := api.NewServiceJob("j", "j", "global", 50)
			job.Update = tt.jobUpdate
			job.TaskGroups = []*api.TaskGroup{tt.group}
			m, d, mode := Defaults(cluster.NewJobSpec(job), "web")
			if m != tt.wantMin || d != tt.wantDeadline || mode != tt.wantMode {
				t.Fatalf("got %s, %s, %s; want %s, %s, %s", m, d, mode, tt.wantMin, tt.wantDeadline, tt.wantMode)
			}
		})
	}
}

func mixedJob() *api.Job {
	job := api.NewServiceJob("shop", "shop", "global", 50)
	job.Meta = map[string]string{"tier": "front"}
	task := api.NewTask("app", "docker")
	task.Services = []*api.Service{
		{Name: "${NOMAD_JOB_NAME}-api", PortLabel: "http", OnUpdate: OnUpdateIgnoreWarnings, Checks: []api.ServiceCheck{
			{Name: "alive", Interval: 5 * time.Second},
			{Name: "${NOMAD_META_tier}-deep", OnUpdate: OnUpdateIgnore, Interval: 30 * time.Second},
		}},
	}
	tg := api.NewTaskGroup("web", 2).AddTask(task)
	tg.Services = []*api.Service{{Provider: "nomad", PortLabel: "admin", Checks: []api.ServiceCheck{{Interval: 3 * time.Second}, {Name: "node ${attr.unique.hostname}"}}}}
	job.TaskGroups = []*api.TaskGroup{tg}
	return job
}

func TestGroupChecksAndAllocChecks(t *testing.T) {
	job := cluster.NewJobSpec(mixedJob())
	want := []CheckSpec{
		{Provider: ProviderNomad, Service: "shop-web", PortLabel: "admin", Name: `service: "shop-web" check`, OnUpdate: OnUpdateRequireHealthy, Interval: 3 * time.Second},
		{Provider: ProviderNomad, Service: "shop-web", PortLabel: "admin", Name: "node ${attr.unique.hostname}", OnUpdate: OnUpdateRequireHealthy},
		{Provider: ProviderConsul, Service: "${NOMAD_JOB_NAME}-api", Task: "app", PortLabel: "http", Name: "alive", OnUpdate: OnUpdateIgnoreWarnings, Interval: 5 * time.Second},
		{Provider: ProviderConsul, Service: "${NOMAD_JOB_NAME}-api", Task: "app", PortLabel: "http", Name: "${NOMAD_META_tier}-deep", OnUpdate: OnUpdateIgnore, Interval: 30 * time.Second},
	}
	if got := GroupChecks(job, "web"); !reflect.DeepEqual(got, want) {
		t.Fatalf("GroupChecks:\n got %+v\nwant %+v", got, want)
	}
	if got := GroupChecks(job, "nope"); got != nil {
		t.Fatalf("unknown group: %+v", got)
	}
	a := &restart.Alloc{ID: "0123456789abcdef", Name: "shop.web[1]", Group: "web", JobID: "shop", Namespace: "default"}
	got := AllocChecks(job, a)
	want[2].Service, want[3].Service, want[3].Name = "shop-api", "shop-api", "front-deep"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("AllocChecks:\n got %+v\nwant %+v", got, want)
	}
	if !Unresolved(got[1].Name) || Unresolved(got[3].Name) {
		t.Fatalf("Unresolved: %q %q", got[1].Name, got[3].Name)
	}
	if n, c := Providers(got); !n || !c {
		t.Fatalf("providers nomad=%v consul=%v", n, c)
	}
	if d := PollInterval(got); d != 3*time.Second {
		t.Fatalf("poll interval %s, want 3s", d)
	}
	if s := ConsulServices(got); !reflect.DeepEqual(s, []string{"shop-api"}) {
		t.Fatalf("consul services %q", s)
	}
	if m := ResolveMode(restart.HealthAuto, job, []string{"web"}); m != restart.HealthChecks {
		t.Fatalf("auto resolved to %s", m)
	}
	if m := ResolveMode(restart.HealthRunning, job, []string{"web"}); m != restart.HealthRunning {
		t.Fatalf("running resolved to %s", m)
	}
}

func TestInterpolate(t *testing.T) {
	env := map[string]string{"A": "x", "NOMAD_ALLOC_INDEX": "3"}
	for in, want := range map[string]string{
		"plain": "plain", "${A}-${NOMAD_ALLOC_INDEX}": "x-3", "${B}/${A}": "${B}/x", "open ${A": "open ${A", "": "",
	} {
		if got := interpolate(in, env); got != want {
			t.Errorf("interpolate(%q) = %q, want %q", in, got, want)
		}
	}
}
