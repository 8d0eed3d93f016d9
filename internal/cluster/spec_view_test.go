package cluster

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

func specPtr[T any](v T) *T { return &v }

// viewJob is a job with what the views read: meta at every level, update blocks, group and
// task services with checks, a lifecycle hook, templates and consul blocks.
func viewJob() *api.Job {
	app := &api.Task{Name: "app", Meta: map[string]string{"t": "1"},
		Consul: &api.Consul{Namespace: "task-ns"},
		Services: []*api.Service{{Name: "api", Provider: "consul", PortLabel: "http", OnUpdate: "ignore_warnings",
			Checks: []api.ServiceCheck{{Name: "http", Type: "http", Interval: 5 * time.Second, Timeout: time.Second, FailuresBeforeCritical: 3, InitialStatus: "passing"}}}},
		Templates: []*api.Template{{EmbeddedTmpl: specPtr(`{{ key "k" }}`), DestPath: specPtr("local/a.env"), ChangeMode: specPtr("noop")}, nil},
	}
	setup := &api.Task{Name: "setup", Lifecycle: &api.TaskLifecycle{Hook: "prestart"}}
	proxy := &api.Task{Name: "proxy", Lifecycle: &api.TaskLifecycle{Hook: "prestart", Sidecar: true}}
	return &api.Job{ID: specPtr("web"), Namespace: specPtr("apps"), Region: specPtr("eu"), Meta: map[string]string{"j": "1"},
		Update: &api.UpdateStrategy{MinHealthyTime: specPtr(3 * time.Second)},
		TaskGroups: []*api.TaskGroup{nil, {
			Name: specPtr("web"), Count: specPtr(3), Meta: map[string]string{"g": "1"},
			Update:   &api.UpdateStrategy{HealthCheck: specPtr("task_states")},
			Consul:   &api.Consul{Namespace: "group-ns", Partition: "part"},
			Services: []*api.Service{{Name: "", Provider: "nomad", Checks: []api.ServiceCheck{{Type: "tcp"}}}},
			Tasks:    []*api.Task{app, nil, setup, proxy},
		}},
	}
}

func TestJobSpecViews(t *testing.T) {
	spec := NewJobSpec(viewJob())
	if spec.Name != "web" || spec.Region != "eu" || spec.Type != "service" || spec.Meta["j"] != "1" {
		t.Fatalf("job: name %q region %q type %q meta %v", spec.Name, spec.Region, spec.Type, spec.Meta)
	}
	if u := spec.Update; u == nil || *u.MinHealthyTime != 3*time.Second || u.HealthyDeadline != nil {
		t.Fatalf("job update %+v", u)
	}
	if _, ok := spec.Group("nope"); ok {
		t.Fatal("an unknown group was found")
	}
	g, ok := spec.Group("web")
	if !ok {
		t.Fatal("group web not found")
	}
	// What the readiness gate reads and what config-change rollouts read, in one view.
	want := onchange.GroupSpec{Name: "web", Count: 3, Meta: map[string]string{"g": "1"}, Update: &onchange.UpdateSpec{HealthCheck: "task_states"},
		Consul:   &onchange.ConsulSpec{Namespace: "group-ns", Partition: "part"},
		Services: []onchange.ServiceSpec{{Provider: "nomad", Checks: []onchange.CheckSpec{{Type: "tcp"}}}},
		Tasks: []onchange.TaskSpec{
			{Name: "app", Meta: map[string]string{"t": "1"}, Consul: &onchange.ConsulSpec{Namespace: "task-ns"},
				Services: []onchange.ServiceSpec{{Name: "api", Provider: "consul", PortLabel: "http", OnUpdate: "ignore_warnings",
					Checks: []onchange.CheckSpec{{Name: "http", Type: "http", InitialStatus: "passing", Interval: 5 * time.Second, Timeout: time.Second, FailuresBeforeCritical: 3}}}},
				Templates: []onchange.TemplateSpec{{Embedded: `{{ key "k" }}`, DestPath: "local/a.env", ChangeMode: "noop"}}},
			{Name: "setup", Ephemeral: true},
			{Name: "proxy"},
		}}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("group\n%+v\nwant\n%+v", g, want)
	}
	if spec.ID != "web" || spec.Namespace != "apps" || len(spec.Groups) != 1 {
		t.Fatalf("job: id %q namespace %q groups %d", spec.ID, spec.Namespace, len(spec.Groups))
	}
	if spec.Job == nil || spec.Job.ID != "web" || spec.Job.Namespace != "apps" {
		t.Fatalf("planning view %+v", spec.Job)
	}
	var none *onchange.JobSpec
	if _, ok := none.Group("web"); ok {
		t.Fatal("a nil JobSpec has no groups")
	}
}
