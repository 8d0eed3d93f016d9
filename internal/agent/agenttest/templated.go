package agenttest

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// The config-change rollouts' tests run jobs whose task renders a variable: a change of the
// variable is a change of the job's configuration.

// PutVar writes the variable at path of namespace default, its item "greeting" set to
// value, with check-and-set at index (0: create), and returns its new ModifyIndex.
func PutVar(t testing.TB, client *api.Client, path, value string, index uint64) uint64 {
	t.Helper()
	return PutItems(t, client, path, map[string]string{"greeting": value}, index)
}

// PutItems writes the variable at path of namespace default with items, with
// check-and-set at index (0: create), and returns its new ModifyIndex.
func PutItems(t testing.TB, client *api.Client, path string, items map[string]string, index uint64) uint64 {
	t.Helper()
	v := &api.Variable{Namespace: "default", Path: path, Items: items, ModifyIndex: index}
	var out *api.Variable
	var err error
	if index == 0 {
		out, _, err = client.Variables().CheckedCreate(v, nil)
	} else {
		out, _, err = client.Variables().CheckedUpdate(v, nil)
	}
	if err != nil {
		t.Fatalf("writing variable %s: %v", path, err)
	}
	return out.ModifyIndex
}

// GreetingTemplate is a template that renders the "greeting" of the variable at path.
func GreetingTemplate(path string) string {
	return `{{ with nomadVar "` + path + `" }}{{ .greeting }}{{ end }}`
}

// Templated adds to the job's first task a template of tmpl rendered with change_mode noop
// (the job is restarted by config-change rollouts, not by Nomad), and sets the job's meta.
func Templated(job *api.Job, tmpl string, meta map[string]string) *api.Job {
	job.Meta = meta
	job.TaskGroups[0].Tasks[0].Templates = []*api.Template{{EmbeddedTmpl: &tmpl, DestPath: new("local/config.txt"), ChangeMode: new("noop")}}
	return job
}
