package changereport

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// groupWithVar is a group of count allocations whose task reads one Nomad variable with
// change_mode noop.
func groupWithVar(name string, count int, meta map[string]string) *api.TaskGroup {
	tg := api.NewTaskGroup(name, count)
	task := api.NewTask("main", "docker")
	body, dest, mode := `{{ nomadVar "nomad/jobs/app" }}`, "local/app.env", "noop"
	task.Templates = []*api.Template{{EmbeddedTmpl: &body, DestPath: &dest, ChangeMode: &mode}}
	tg.AddTask(task)
	tg.Meta = meta
	return tg
}

func explainedJob(typ string, meta map[string]string, groups ...*api.TaskGroup) *api.Job {
	id := "app"
	job := &api.Job{ID: &id, Type: &typ, Meta: meta}
	for _, tg := range groups {
		job.AddTaskGroup(tg)
	}
	return job
}

func TestExplainOutcome(t *testing.T) {
	auto := map[string]string{onchange.KeyOnChange: "auto"}
	cases := []struct {
		name string
		job  *api.Job
		want string
	}{
		{"one group rolls", explainedJob(api.JobTypeService, auto, groupWithVar("web", 3, nil)),
			`On a change of a source a group watches, the agent restarts group "web"'s 3 allocations in batches of 1 (tasks running, on error fail), 10s after the last change of a burst.`},
		{"a group opted out", explainedJob(api.JobTypeService, auto, groupWithVar("web", 1, map[string]string{onchange.KeyBatchSize: "50%", onchange.KeyDebounce: "1m"}),
			groupWithVar("db", 2, map[string]string{onchange.KeyOnChange: "off"})),
			`the agent restarts group "web"'s 1 allocation in batches of 50% (tasks running, on error fail), 1m0s after the last change of a burst. Not rolled: group "db" opted out.`},
		{"system job", explainedJob(api.JobTypeSystem, auto, groupWithVar("agent", 1, map[string]string{onchange.KeyHealth: "none"})),
			`restarts every allocation of group "agent" in batches of 1 (no health gate, on error fail)`},
		{"nobody opted in", explainedJob(api.JobTypeService, nil, groupWithVar("web", 3, nil)),
			`Nothing would happen on a change: group "web" has not opted in (add "nomad-restart.on-change" = "auto" to its meta or the job's).`},
		{"nothing to watch", explainedJob(api.JobTypeService, auto, api.NewTaskGroup("web", 1)),
			`Nothing would happen on a change: group "web" reads no Nomad variable or Consul key the agent can watch.`},
		{"invalid meta", explainedJob(api.JobTypeService, map[string]string{onchange.KeyOnChange: "auto", onchange.KeySurge: "-1"}, groupWithVar("web", 1, nil)),
			`Nothing would happen on a change: group "web" has invalid meta (see Problems).`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := cluster.NewJobSpec(tc.job)
			got := explainOutcome(spec, onchange.Analyze(*spec))
			if !strings.Contains(got, tc.want) {
				t.Errorf("outcome:\n%s\nwant it to contain:\n%s", got, tc.want)
			}
		})
	}
}

func TestConsentText(t *testing.T) {
	cases := []struct {
		name          string
		jobMeta, grpM map[string]string
		want          string
	}{
		{"job level", map[string]string{onchange.KeyOnChange: "auto"}, nil, `yes: nomad-restart.on-change = "auto" in the job's meta`},
		{"group wins", map[string]string{onchange.KeyOnChange: "auto"}, map[string]string{onchange.KeyOnChange: "off"}, `no: opted out with nomad-restart.on-change = "off" in the group's meta`},
		{"explicit", nil, map[string]string{onchange.KeyOnChange: "nomad:nomad/jobs/app"}, `yes, to the sources named in nomad-restart.on-change = "nomad:nomad/jobs/app" in the group's meta`},
		{"none", nil, nil, "no: neither the job's nor the group's meta sets nomad-restart.on-change"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := explainedJob(api.JobTypeService, tc.jobMeta, groupWithVar("web", 1, tc.grpM))
			spec := cluster.NewJobSpec(job)
			if got := consentText(spec, onchange.Analyze(*spec).Groups[0]); got != tc.want {
				t.Errorf("consent = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRolloutHealth checks that the gate and its times are those the engine would plan:
// checks where the group has some, with the update block's times unless the meta sets them.
func TestRolloutHealth(t *testing.T) {
	checked := func(meta map[string]string) *api.Job {
		tg := groupWithVar("web", 2, meta)
		tg.Services = []*api.Service{{Name: "web", Checks: []api.ServiceCheck{{Name: "ready", Type: "http"}}}}
		minH, deadline := 30*time.Second, 2*time.Minute
		tg.Update = &api.UpdateStrategy{MinHealthyTime: &minH, HealthyDeadline: &deadline}
		return explainedJob(api.JobTypeService, map[string]string{onchange.KeyOnChange: "auto"}, tg)
	}
	cases := []struct {
		name           string
		job            *api.Job
		mode           restart.HealthMode
		minH, deadline time.Duration
	}{
		{"checks from the update block", checked(nil), restart.HealthChecks, 30 * time.Second, 2 * time.Minute},
		{"meta wins", checked(map[string]string{onchange.KeyMinHealthyTime: "5s", onchange.KeyHealthyDeadline: "1m"}), restart.HealthChecks, 5 * time.Second, time.Minute},
		{"running asked", checked(map[string]string{onchange.KeyHealth: "running"}), restart.HealthRunning, 0, 2 * time.Minute},
		{"no checks", explainedJob(api.JobTypeService, nil, groupWithVar("web", 1, nil)), restart.HealthRunning, 0, restart.DefaultHealthyDeadline},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := cluster.NewJobSpec(tc.job)
			mode, minH, deadline := rolloutHealth(spec, onchange.Analyze(*spec).Groups[0])
			if mode != tc.mode || minH != tc.minH || deadline != tc.deadline {
				t.Errorf("got %s %s %s, want %s %s %s", mode, minH, deadline, tc.mode, tc.minH, tc.deadline)
			}
		})
	}
}

// watches -explain says, per group, where a rollout's restarts lose requests through a
// balancer, as run's plan does: a Consul service without shutdown_delay does, one with a
// delay does not, and a Nomad service always does.
func TestExplainShowsRequestsAtRisk(t *testing.T) {
	auto := map[string]string{onchange.KeyOnChange: "auto"}
	withService := func(provider string, delay time.Duration) *api.Job {
		tg := groupWithVar("web", 3, nil)
		tg.Services = []*api.Service{{Name: "web", Provider: provider}}
		if delay > 0 {
			tg.ShutdownDelay = &delay
		}
		return explainedJob(api.JobTypeService, auto, tg)
	}
	cases := []struct {
		name string
		job  *api.Job
		want []string // "" : no section
	}{
		{"consul without delay", withService("consul", 0), []string{"Requests at Risk", `group web: service "web" stopped with no delay`, "shutdown_delay"}},
		{"consul with delay", withService("consul", 2*time.Second), nil},
		{"nomad provider", withService("nomad", 2*time.Second), []string{"Requests at Risk", "Nomad's catalog has no health"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := cluster.NewJobSpec(tc.job)
			var out strings.Builder
			PrintExplain(&out, spec, WatchedJob{Explain: onchange.Analyze(*spec)})
			if tc.want == nil && strings.Contains(out.String(), "Requests at Risk") {
				t.Errorf("explain warns of requests at risk:\n%s", out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("explain lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
