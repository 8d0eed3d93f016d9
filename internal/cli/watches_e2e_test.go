package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// templated adds a template to the first task of job's first group.
func templated(job *api.Job, dest, body, changeMode string) *api.Job {
	task := job.TaskGroups[0].Tasks[0]
	task.Templates = append(task.Templates, &api.Template{EmbeddedTmpl: &body, DestPath: &dest, ChangeMode: &changeMode})
	return job
}

// watchesJobs are the jobs of the watches tests, registered on one cluster:
//   - web opts in at job level with batch-size 2 at group level, and reads one variable
//     with the default delimiters and one with its own, both with change_mode noop;
//   - web-plain reads a Consul key in another datacenter and a Vault secret but has not
//     opted in;
//   - web-bad opts in with an invalid batch size and an option in a task's meta;
//   - web-loud opts in with change_mode restart.
func watchesJobs() []*api.Job {
	web := templated(simpleJob("web", api.JobTypeService, 3), "local/app.env",
		`{{ with nomadVar "nomad/jobs/web/config" }}PORT={{ .port }}{{ end }}`, "noop")
	left, right := "[[", "]]"
	web = templated(web, "local/extra.env", `[[ with nomadVar "nomad/jobs/web/extra" ]]X=[[ .x ]][[ end ]]`, "noop")
	web.TaskGroups[0].Tasks[0].Templates[1].LeftDelim, web.TaskGroups[0].Tasks[0].Templates[1].RightDelim = &left, &right
	web.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	web.TaskGroups[0].Meta = map[string]string{onchange.KeyBatchSize: "2"}

	plain := templated(simpleJob("web-plain", api.JobTypeService, 1), "local/app.env",
		`{{ key "web/config@dc2" }}{{ with secret "secret/db" }}{{ .Data.password }}{{ end }}`, "noop")

	bad := templated(simpleJob("web-bad", api.JobTypeService, 1), "local/app.env", `{{ nomadVar "nomad/jobs/web-bad" }}`, "noop")
	bad.TaskGroups[0].Meta = map[string]string{onchange.KeyOnChange: "auto", onchange.KeyBatchSize: "zero"}
	bad.TaskGroups[0].Tasks[0].Meta = map[string]string{onchange.KeySurge: "1"}

	loud := templated(simpleJob("web-loud", api.JobTypeService, 2), "local/app.env", `{{ nomadVar "nomad/jobs/web-loud" }}`, "restart")
	loud.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	return []*api.Job{web, plain, bad, loud}
}

// TestWatchesExplain explains each kind of job through the CLI against nomadsim, which
// must hand back the templates (delimiters, change_mode) and the job, group and task meta
// as they were registered; and checks that nothing is written.
func TestWatchesExplain(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, watchesJobs()...)
	ctx := testCtx(t)
	before := c.Stats().Mutations

	cases := []struct {
		name string
		job  string
		want []string
	}{
		{"opted in", "web", []string{
			`Consent          = yes: nomad-restart.on-change = "auto" in the job's meta`,
			"Batch Size       = 2",
			"On Error         = fail",
			"Debounce         = 10s",
			`Health           = auto, which is "running" for this group`,
			`nomad/jobs/web/config`, `nomad/jobs/web/extra`, "local/extra.env", "nomadVar", "noop",
			`On a change of a source a group watches, the agent restarts group "web"'s 3 allocations in batches of 2 (tasks running, on error fail), 10s after the last change of a burst.`,
		}},
		{"not opted in", "web-plain", []string{
			"Opted In  = no\n",
			`Sources nomad-restart.on-change = "auto" Would Watch`,
			"Consul key", "web/config", "datacenter dc2",
			"Not Watched", `{{ secret "secret/db" }}`, "a Vault secret: the agent does not watch Vault",
			`Nothing would happen on a change: group "web" has not opted in`,
		}},
		{"invalid meta", "web-bad", []string{
			"Options = not read until the problems below are fixed",
			"Problems (no rollout until they are fixed)",
			`group meta nomad-restart.batch-size = "zero"`,
			`task "main" meta nomad-restart.surge = "1": a task's meta is not read`,
			`Nothing would happen on a change: group "web" has invalid meta (see Problems).`,
		}},
		{"change_mode restart", "web-loud", []string{
			"Warnings",
			`has change_mode "restart"`, `set change_mode = "noop"`,
			`restarts group "web"'s 2 allocations in batches of 1`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := e.run(ctx, "watches", "-explain", tc.job)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			for _, s := range tc.want {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			if last := finalLine(out); !strings.HasPrefix(last, "On a change") && !strings.HasPrefix(last, "Nothing would happen on a change") {
				t.Errorf("the last line says nothing of what would happen: %q", last)
			}
		})
	}
	assertNoMutationsSince(t, c, before)
}

func finalLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestWatchesExplainJSON checks the JSON form: the Explain with its field names, read back
// into onchange's types.
func TestWatchesExplainJSON(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, watchesJobs()[0])
	code, out, errOut := e.run(testCtx(t), "watches", "-explain", "-json", "web")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, field := range []string{`"JobID": "web"`, `"Consent": "auto"`, `"OnChange": "auto"`, `"Watched"`, `"Kind": "nomad-variable"`, `"ChangeMode": "noop"`, `"Debounce": 10000000000`} {
		if !strings.Contains(out, field) {
			t.Errorf("JSON lacks %s:\n%s", field, out)
		}
	}
	var got onchange.Explain
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	if got.Namespace != "default" || len(got.Groups) != 1 {
		t.Fatalf("explain = %+v", got)
	}
	g := got.Groups[0]
	if !g.Rolls() || len(g.Problems) != 0 || len(g.Warnings) != 0 {
		t.Errorf("group should roll without problems or warnings: %+v", g)
	}
	if want := []restart.BatchSize{{N: 2}}; len(g.Spec.BatchSizes) != 1 || g.Spec.BatchSizes[0] != want[0] {
		t.Errorf("batch sizes = %+v, want %+v", g.Spec.BatchSizes, want)
	}
	var paths []string
	for _, w := range g.Watched {
		if w.Source.Kind != onchange.NomadVariable || w.Source.Namespace != "default" || len(w.Reads) != 1 {
			t.Errorf("watched = %+v", w)
			continue
		}
		r := w.Reads[0]
		if r.Task != "main" || r.Function != "nomadVar" || r.ChangeMode != "noop" {
			t.Errorf("read = %+v", r)
		}
		paths = append(paths, w.Source.Path)
	}
	if strings.Join(paths, ",") != "nomad/jobs/web/config,nomad/jobs/web/extra" {
		t.Errorf("watched paths = %v: the template with [[ ]] delimiters must be read with them", paths)
	}
}

// TestWatchesList lists the opted-in jobs of a namespace, and of every namespace.
func TestWatchesList(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, watchesJobs()...)
	ctx := testCtx(t)
	if _, err := adminClient(t, c).Namespaces().Register(&api.Namespace{Name: "team"}, nil); err != nil {
		t.Fatalf("creating namespace team: %v", err)
	}
	other := watchesJobs()[0]
	team := "team"
	other.ID, other.Name, other.Namespace = new("other"), new("other"), &team
	if _, err := c.RegisterJob(other); err != nil { // watches reads the specification only
		t.Fatalf("registering other: %v", err)
	}

	code, out, errOut := e.run(ctx, "watches")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, s := range []string{"Job", "Last Rollout", `Nomad variable "nomad/jobs/web/config" (namespace default, region global)`, "web-bad", "no: invalid meta", "web-loud", noneNomad, "Last Rollout is the job's newest"} {
		if !strings.Contains(out, s) {
			t.Errorf("list lacks %q:\n%s", s, out)
		}
	}
	for _, s := range []string{"web-plain", "other"} {
		if strings.Contains(out, s) {
			t.Errorf("list shows %s, which is not opted in or not in the namespace:\n%s", s, out)
		}
	}

	code, out, errOut = e.run(ctx, "watches", "-json", "-namespace=*")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var list []onchange.Explain
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	var ids []string
	for _, x := range list {
		ids = append(ids, x.Namespace+"/"+x.JobID)
	}
	if got := strings.Join(ids, " "); got != "default/web default/web-bad default/web-loud team/other" {
		t.Errorf("opted-in jobs = %s", got)
	}
}

// TestWatchesEmptyList checks the answer when no job opts in, in both forms.
func TestWatchesEmptyList(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, watchesJobs()[1])
	ctx := testCtx(t)
	code, out, _ := e.run(ctx, "watches")
	if code != 0 || !strings.HasPrefix(out, "No jobs opt in to config-change rollouts in namespace \"default\"") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
	code, out, _ = e.run(ctx, "watches", "-json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("exit %d, JSON:\n%s", code, out)
	}
}

// TestWatchesBadInput checks that every wrong command line gives exit 1, one line on
// stderr naming the problem, nothing on stdout, and no write to Nomad.
func TestWatchesBadInput(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, watchesJobs()...)
	ctx := testCtx(t)
	before := c.Stats().Mutations
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown job", []string{"-explain", "nosuch"}, `No job(s) with prefix or ID "nosuch" found in namespace "default"`},
		{"ambiguous prefix", []string{"-explain", "web-"}, `job prefix "web-" matched multiple jobs (default/web-bad, default/web-loud, default/web-plain)`},
		{"missing job", []string{"-explain"}, "missing job: give a job ID or a unique prefix"},
		{"extra arguments", []string{"-explain", "web", "web-bad"}, `too many arguments "web web-bad"`},
		{"a job without -explain", []string{"web"}, "unexpected arguments \"web\": to explain one job, use `nomad-restart watches -explain web`"},
		{"unknown option", []string{"-nosuch"}, "unknown option -nosuch"},
		{"unknown namespace", []string{"-explain", "-namespace=nosuch", "web"}, `found in namespace "nosuch"`},
		{"Consul certificate without its key", []string{"-consul-client-cert=client.pem"}, "-consul-client-cert and -consul-client-key go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := e.run(ctx, append([]string{"watches"}, tc.args...)...)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q; want exit 1 and nothing on stdout", code, out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr = %q, want one line containing %q", errOut, tc.want)
			}
		})
	}
	assertNoMutationsSince(t, c, before)
}

// TestWatchesACL checks what a token that may read a job but not list jobs gets: -explain
// of the exact ID still works (Nomad's lookup falls back to the literal ID), and the
// listing is refused in one line that names the capability.
func TestWatchesACL(t *testing.T) {
	c := startSim(t, nomadsim.Options{ACLs: true})
	if _, err := c.RegisterJob(watchesJobs()[0]); err != nil {
		t.Fatalf("registering web: %v", err)
	}
	token, err := c.CreateToken("reader", map[string]string{"reader": `namespace "default" { capabilities = ["read-job"] }`})
	if err != nil {
		t.Fatal(err)
	}
	e := newCLIEnv(t, c)
	e.token = token
	ctx := testCtx(t)

	code, out, errOut := e.run(ctx, "watches", "-explain", "web")
	if code != 0 || !strings.Contains(out, `restarts group "web"'s 3 allocations in batches of 2`) {
		t.Errorf("explain with read-job only: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(ctx, "watches")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "the token needs list-jobs and read-job") {
		t.Errorf("listing without list-jobs: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
