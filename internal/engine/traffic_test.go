package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
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
