package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cli/changereport"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// startWatchesEnv is startSimEnv of the watches tests' jobs (watchesJobs), with the test's
// context.
func startWatchesEnv(t *testing.T) (*nomadsim.Cluster, cliEnv, context.Context) {
	t.Helper()
	c, e := startSimEnv(t, nomadsim.Options{}, watchesJobs()...)
	return c, e, testCtx(t)
}

// TestWatchesExplain explains each kind of job through the CLI against nomadsim, which
// must hand back the templates (delimiters, change_mode) and the job, group and task meta
// as they were registered; and checks that nothing is written.
func TestWatchesExplain(t *testing.T) {
	c, e, ctx := startWatchesEnv(t)
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
	c, e, ctx := startWatchesEnv(t)
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
	for _, s := range []string{"Job", "Last Rollout", `Nomad variable "nomad/jobs/web/config" (namespace default, region global)`, "web-bad", "no: invalid meta", "web-loud", changereport.NoneNomad, "Last Rollout is the job's newest"} {
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
	c, e, ctx := startWatchesEnv(t)
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
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	if _, err := c.RegisterJob(watchesJobs()[0]); err != nil {
		t.Fatalf("registering web: %v", err)
	}
	e := newCLIEnvAs(t, c, "reader", `namespace "default" { capabilities = ["read-job"] }`)
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

// rowOf returns the listing's row of the job that names source.
func rowOf(t *testing.T, out, job, source string) string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, job+" ") && strings.Contains(line, source) {
			return line
		}
	}
	t.Fatalf("no row of %s for %s in:\n%s", job, source, out)
	return ""
}

// TestWatchesLastChangeAndRollout lists the jobs with their facts: the newest write of a
// variable written twice (index and Nomad's time), "none" for a missing one, a Consul key's
// index, and the job's newest rollout that config-change triggers started, not the
// operator's restart filed after it. Nothing is written to Nomad.
func TestWatchesLastChangeAndRollout(t *testing.T) {
	f := newWatchesFixture(t)
	ctx := testCtx(t)
	before := f.c.Stats().Mutations

	code, out, errOut := f.e.run(ctx, "watches")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if f.config.ModifyIndex <= f.first {
		t.Fatalf("the second write's index %d is not above the first's %d", f.config.ModifyIndex, f.first)
	}
	wantChange := fmt.Sprintf("index %d at %s", f.config.ModifyIndex, output.FormatTime(time.Unix(0, f.config.ModifyTime)))
	wantRollout := output.ShortID(f.rollout.ID, false) + " (succeeded)"
	checks := []struct{ job, source, want string }{
		{"web", `"nomad/jobs/web/config"`, wantChange},
		{"web", `"nomad/jobs/web/config"`, wantRollout},
		{"web", `"nomad/jobs/web/extra"`, changereport.NoneNomad},
		{"web", `"nomad/jobs/web/extra"`, wantRollout},
		{"web-loud", `"nomad/jobs/web-loud"`, changereport.NoneNomad},
		{"web-kv", `Consul key "web/config"`, fmt.Sprintf("index %d ", f.kvIndex)},
		{"web-list", `Nomad variables under "nomad/jobs/web/"`, fmt.Sprintf("index %d at %s", f.under.ModifyIndex, output.FormatTime(time.Unix(0, f.under.ModifyTime)))},
	}
	for _, ck := range checks {
		if row := rowOf(t, out, ck.job, ck.source); !strings.Contains(row, ck.want) {
			t.Errorf("row of %s for %s lacks %q: %s", ck.job, ck.source, ck.want, row)
		}
	}
	if row := rowOf(t, out, "web-loud", "web-loud"); !strings.HasSuffix(strings.TrimSpace(row), "  none") {
		t.Errorf("web-loud has no rollout, its row should end with none: %q", row)
	}
	if strings.Contains(out, output.ShortID(f.operator.ID, false)) {
		t.Errorf("the operator's restart, which has no triggers, is shown as a rollout:\n%s", out)
	}
	assertNoMutationsSince(t, f.c, before)
}

// watchesJSON is the part of `watches -json` the tests read.
type watchesJSON struct {
	JobID   string
	Groups  []onchange.Group
	Sources []struct {
		Source     onchange.Source
		LastChange *struct {
			Index uint64
			Time  *time.Time
		}
		Note string
	}
	LastRollout *struct{ ID, Status string }
}

// TestWatchesLastChangeJSON checks the facts' fields in -json, for the listing and for
// -explain: the explanation's fields stay, and LastChange and LastRollout are objects or
// null.
func TestWatchesLastChangeJSON(t *testing.T) {
	f := newWatchesFixture(t)
	ctx := testCtx(t)
	before := f.c.Stats().Mutations

	code, out, errOut := f.e.run(ctx, "watches", "-json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var list []watchesJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	byJob := map[string]watchesJSON{}
	for _, j := range list {
		byJob[j.JobID] = j
	}
	web, loud, kv := byJob["web"], byJob["web-loud"], byJob["web-kv"]
	if len(web.Groups) != 1 || len(web.Sources) != 2 {
		t.Fatalf("web: want its group and 2 sources:\n%s", out)
	}
	cfg, extra := web.Sources[0], web.Sources[1]
	if cfg.Source.Path != "nomad/jobs/web/config" || cfg.LastChange == nil || cfg.LastChange.Index != f.config.ModifyIndex ||
		cfg.LastChange.Time == nil || !cfg.LastChange.Time.Equal(time.Unix(0, f.config.ModifyTime)) {
		t.Errorf("web's config source = %+v, want index %d at %v", cfg, f.config.ModifyIndex, time.Unix(0, f.config.ModifyTime))
	}
	if extra.LastChange != nil || extra.Note != changereport.NoneNomad {
		t.Errorf("missing variable = %+v, want LastChange null and Note %q", extra, changereport.NoneNomad)
	}
	if web.LastRollout == nil || web.LastRollout.ID != f.rollout.ID || web.LastRollout.Status != "succeeded" {
		t.Errorf("web's LastRollout = %+v, want %s succeeded", web.LastRollout, f.rollout.ID)
	}
	if loud.JobID == "" || loud.LastRollout != nil {
		t.Errorf("web-loud's LastRollout = %+v, want null", loud.LastRollout)
	}
	if len(kv.Sources) != 1 || kv.Sources[0].LastChange == nil || kv.Sources[0].LastChange.Index != f.kvIndex || kv.Sources[0].LastChange.Time != nil {
		t.Errorf("web-kv's sources = %+v, want index %d and Time null", kv.Sources, f.kvIndex)
	}
	for _, field := range []string{`"LastRollout": null`, `"Time": null`, `"LastChange": null`} {
		if !strings.Contains(out, field) {
			t.Errorf("JSON lacks %s:\n%s", field, out)
		}
	}

	code, out, errOut = f.e.run(ctx, "watches", "-explain", "-json", "web")
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s\n%s", code, out, errOut)
	}
	var one watchesJSON
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	if one.JobID != "web" || len(one.Groups) != 1 || len(one.Sources) != 2 || one.LastRollout == nil || one.LastRollout.ID != f.rollout.ID {
		t.Errorf("explain JSON = %+v", one)
	}
	assertNoMutationsSince(t, f.c, before)
}

// TestWatchesExplainLastFacts checks the section -explain ends with before its outcome,
// and what a Consul source shows when no Consul address is given.
func TestWatchesExplainLastFacts(t *testing.T) {
	f := newWatchesFixture(t)
	ctx := testCtx(t)
	before := f.c.Stats().Mutations

	code, out, errOut := f.e.run(ctx, "watches", "-explain", "web")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	wantChange := fmt.Sprintf("index %d at %s", f.config.ModifyIndex, output.FormatTime(time.Unix(0, f.config.ModifyTime)))
	for _, s := range []string{"\nLast Changes\n", wantChange, changereport.NoneNomad, "Last Rollout = " + output.ShortID(f.rollout.ID, false) + " (succeeded)"} {
		if !strings.Contains(out, s) {
			t.Errorf("explain lacks %q:\n%s", s, out)
		}
	}
	if last := finalLine(out); !strings.HasPrefix(last, "On a change") {
		t.Errorf("the outcome is no longer the last line: %q", last)
	}

	code, out, errOut = runWithoutConsul(ctx, f.e, "watches", "-explain", "web-kv")
	if code != 0 || !strings.Contains(out, changereport.NoConsul) || !strings.Contains(out, "Last Rollout = none") {
		t.Errorf("without Consul: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runWithoutConsul(ctx, f.e, "watches", "-explain", "-consul-address", f.c.ConsulAddr(), "web-kv")
	if want := fmt.Sprintf("index %d\n", f.kvIndex); code != 0 || !strings.Contains(out, want) {
		t.Errorf("with -consul-address: exit %d, want %q\n%s\n%s", code, want, out, errOut)
	}
	assertNoMutationsSince(t, f.c, before)
}

// runWithoutConsul runs a command whose environment names no Consul at all.
func runWithoutConsul(ctx context.Context, e cliEnv, args ...string) (int, string, string) {
	var out, errb simtest.SyncBuffer
	env := map[string]string{"NOMAD_ADDR": e.addr, "NOMAD_TOKEN": e.token, "USER": "tester"}
	a := newApp(strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	a.backend = nomadBackend{localDir: e.localDir, clock: e.clock, timeScale: e.scale}
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

// TestWatchesUnlistableVariable checks that a variable the token may not list reads as
// missing (Nomad leaves it out of the listing), and that the command still needs no
// read capability on it.
func TestWatchesUnlistableVariable(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	register(t, c, watchesJobs()[0])
	admin := adminClient(t, c)
	writeVariable(t, admin, "nomad/jobs/web/config", "8080")
	writeVariable(t, admin, "nomad/jobs/web/extra", "1")
	e := newCLIEnvAs(t, c, "watcher", `namespace "default" {
  capabilities = ["list-jobs", "read-job"]
  variables {
    path "nomad/jobs/web/config" { capabilities = ["list"] }
    path "nomad-restart/*" { capabilities = ["list", "read"] }
  }
}`)
	ctx := testCtx(t)
	before := c.Stats().Mutations
	code, out, errOut := e.run(ctx, "watches")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if row := rowOf(t, out, "web", `"nomad/jobs/web/config"`); !strings.Contains(row, "index ") {
		t.Errorf("the listable variable shows no index: %s", row)
	}
	if row := rowOf(t, out, "web", `"nomad/jobs/web/extra"`); !strings.Contains(row, changereport.NoneNomad) {
		t.Errorf("the unlistable variable should read as %q: %s", changereport.NoneNomad, row)
	}
	assertNoMutationsSince(t, c, before)
}

// The stale command and run -stale-only: the allocations running a template that Nomad
// re-rendered after their tasks started, which the watches listing and explanation follow
// too (rendered consent, allocation file access).

// staleDest is the change_mode noop template of the stale tests' job.
const staleDest = "local/app.env"

// noopJob is service job id of count allocations whose task main has one change_mode noop
// template, which nomadsim renders into the allocation directory before the task starts.
func noopJob(id string, count int) *api.Job {
	return templated(simpleJob(id, api.JobTypeService, count), staleDest, `{{ with secret "secret/app" }}{{ .Data.token }}{{ end }}`, "noop")
}

// staleListing is `stale -json`, which must exit 0.
func staleListing(t *testing.T, ctx context.Context, e cliEnv, args ...string) []changereport.StaleJob {
	t.Helper()
	code, out, errOut := e.run(ctx, append([]string{"stale", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("stale -json: exit %d\n%s\n%s", code, out, errOut)
	}
	var list []changereport.StaleJob
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("stale -json: %v\n%s", err, out)
	}
	return list
}

// staleIDs are the IDs of the stale allocations of the listing, sorted.
func staleIDs(list []changereport.StaleJob) []string {
	var ids []string
	for _, j := range list {
		for _, a := range j.Allocs {
			ids = append(ids, a.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// rerender has nomadsim re-render the noop template of each allocation, as a client does
// when the template's data changed, after the allocation's task started.
func rerender(t *testing.T, c *nomadsim.Cluster, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := c.RerenderAllocTemplate(id, "main", staleDest); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaleAndRunStaleOnly follows a re-render end to end over Nomad's HTTP API: nothing is
// stale after the job starts; after two of three allocations re-rendered their noop
// template, stale lists exactly those two (human and -json), run -stale-only restarts
// exactly those two, once each, and afterwards nothing is stale and run -stale-only
// records nothing.
func TestStaleAndRunStaleOnly(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, noopJob("web", 3), simpleJob("plain", api.JobTypeService, 1))
	ctx := testCtx(t)

	if list := staleListing(t, ctx, e); len(list) != 1 || list[0].JobID != "web" || len(list[0].Allocs) != 0 || list[0].FilesDenied {
		t.Fatalf("before any re-render, stale -json = %+v; want job web (the only one with a template) and no allocation", list)
	}
	code, out, errOut := e.run(ctx, "stale")
	if code != 0 || !strings.Contains(out, "No stale allocations: no running allocation of the 1 job read") || errOut != "" {
		t.Fatalf("stale before any re-render: exit %d\n%s\n%s", code, out, errOut)
	}

	allocs := allocsOf(t, c, "web")
	stale := []string{allocs[0].ID, allocs[2].ID}
	slices.Sort(stale)
	rerender(t, c, stale...)

	list := staleListing(t, ctx, e)
	if got := staleIDs(list); !slices.Equal(got, stale) {
		t.Fatalf("stale -json lists %v, want the two re-rendered allocations %v", got, stale)
	}
	for _, a := range list[0].Allocs {
		if a.Group != "web" || len(a.Templates) != 1 {
			t.Fatalf("stale allocation %+v", a)
		}
		tm := a.Templates[0]
		if tm.Task != "main" || tm.Destination != staleDest || tm.By != onchange.FollowFile || !tm.RenderedAt.After(tm.TaskStartedAt) || !a.StaleSince.Equal(tm.RenderedAt) {
			t.Errorf("stale template %+v of %s", tm, a.ID)
		}
	}
	code, out, errOut = e.run(ctx, "stale", "web")
	if code != 0 || errOut != "" {
		t.Fatalf("stale web: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, s := range []string{output.ShortID(stale[0], false), output.ShortID(stale[1], false), staleDest, "2 allocations of 1 job run with templates re-rendered", "    nomad-restart run -stale-only web\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("stale lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, output.ShortID(allocs[1].ID, false)) {
		t.Errorf("stale lists %s, which was not re-rendered:\n%s", allocs[1].ID, out)
	}

	code, out, errOut = e.run(ctx, "run", "-stale-only", "-batch-size", "1", "-on-error=fail", "web")
	t.Logf("run -stale-only:\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, `Found 2 allocations of job "web" running with templates re-rendered after their tasks started`) {
		t.Fatalf("run -stale-only: exit %d", code)
	}
	simtest.CheckOnce(t, adminClient(t, c), "default", "web", stale, false, 30*time.Second)
	rec := statusOf(t, ctx, e, waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusSucceeded }))
	if rec.Batches != 2 || len(rec.Allocs) != 2 || !slices.Equal(sortedCopy(rec.Spec.OnlyAllocs), stale) {
		t.Errorf("the restart planned %d batches of %d allocations, OnlyAllocs %v; want 2 of the 2 stale ones", rec.Batches, len(rec.Allocs), rec.Spec.OnlyAllocs)
	}

	if list := staleListing(t, ctx, e, "web"); len(staleIDs(list)) != 0 {
		t.Errorf("after run -stale-only, stale still lists %v", staleIDs(list))
	}
	before := c.Stats().Mutations
	code, out, errOut = e.run(ctx, "run", "-stale-only", "-on-error=fail", "web")
	if code != 0 || out != "No allocation of job \"web\" runs with a template re-rendered after its tasks started: nothing to restart\n" || errOut != "" {
		t.Errorf("run -stale-only with nothing stale: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	assertNoMutationsSince(t, c, before)
	code, out, _ = e.run(ctx, "status", "-json", "-job=web")
	var recs []restart.Record
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 {
		t.Errorf("status -job=web: exit %d, want the one restart recorded:\n%s", code, out)
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestRunStaleOnlyDryRunAndJSON checks that -stale-only plans as run does: -dry-run shows
// only the stale allocation and changes nothing; -json with nothing stale prints the
// empty plan, as run does when nothing is to be restarted, and records nothing.
func TestRunStaleOnlyDryRunAndJSON(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, noopJob("web", 2))
	ctx := testCtx(t)
	before := c.Stats().Mutations

	code, out, errOut := e.run(ctx, "run", "-stale-only", "-json", "-on-error=fail", "web")
	var plan restart.Record
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || len(plan.Allocs) != 0 {
		t.Fatalf("run -stale-only -json with nothing stale: exit %d\n%s\n%s", code, out, errOut)
	}

	allocs := allocsOf(t, c, "web")
	rerender(t, c, allocs[1].ID)
	code, out, errOut = e.run(ctx, "run", "-stale-only", "-dry-run", "-verbose", "web")
	if code != 0 || !strings.Contains(out, allocs[1].ID) || !strings.Contains(out, "none of its templates was re-rendered after its tasks started") {
		t.Fatalf("run -stale-only -dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(strings.ReplaceAll(out, "Skipping allocation \""+allocs[0].ID, ""), allocs[0].ID) {
		t.Errorf("the dry run plans %s, which is not stale:\n%s", allocs[0].ID, out)
	}
	assertNoMutationsSince(t, c, before)
}

// TestStaleBadInput checks that every wrong command line gives exit 1, one line on stderr
// naming the problem, nothing on stdout, and no write to Nomad.
func TestStaleBadInput(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, noopJob("web", 1), noopJob("web-2", 1))
	ctx := testCtx(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown job", []string{"stale", "nosuch"}, `No job(s) with prefix or ID "nosuch" found in namespace "default"`},
		{"ambiguous prefix", []string{"stale", "we"}, `job prefix "we" matched multiple jobs (default/web, default/web-2)`},
		{"empty job", []string{"stale", " "}, "empty job ID"},
		{"unknown option", []string{"stale", "-nosuch"}, "unknown option -nosuch"},
		{"run -stale-only of an unknown job", []string{"run", "-stale-only", "-on-error=fail", "nosuch"}, `No job(s) with prefix or ID "nosuch"`},
		{"run -stale-only with -jobs", []string{"run", "-stale-only", "-jobs", `Name matches "^web"`}, "-stale-only cannot be used with -jobs"},
		{"run -stale-only with -every", []string{"run", "-stale-only", "-every", "@daily", "web-2"}, "-stale-only cannot be used with -at or -every"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runRefused(t, ctx, e, c, true, tc.want, tc.args...)
		})
	}
}

// TestStaleWithoutReadFS checks what a token that may read jobs but not allocation files
// gets: stale and run -stale-only refuse in one line naming read-fs, and watches shows
// that the token cannot read the files of a job that follows its templates by them. With
// read-fs, the same reading works.
func TestStaleWithoutReadFS(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	job := noopJob("web", 2)
	job.Meta = map[string]string{onchange.KeyOnChange: string(onchange.ConsentRendered)}
	register(t, c, job)
	ctx := testCtx(t)
	rules := `namespace "default" {
  capabilities = [%s]
  variables {
    path "nomad-restart/*" { capabilities = ["list", "read", "write", "destroy"] }
  }
}`
	noFS := newCLIEnvAs(t, c, "no-fs", fmt.Sprintf(rules, `"list-jobs", "read-job", "alloc-lifecycle"`))
	withFS := newCLIEnvAs(t, c, "with-fs", fmt.Sprintf(rules, `"list-jobs", "read-job", "alloc-lifecycle", "read-fs"`))

	for _, args := range [][]string{{"stale"}, {"stale", "-json", "web"}, {"run", "-stale-only", "-on-error=fail", "web"}} {
		runRefused(t, ctx, noFS, c, true, "the read-fs capability", args...)
	}
	code, out, errOut := noFS.run(ctx, "watches", "-explain", "web")
	if code != 0 || !strings.Contains(out, `Allocation Files = not readable: this token may not read allocation files in namespace "default": grant the read-fs capability`) {
		t.Errorf("watches -explain without read-fs: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = noFS.run(ctx, "watches")
	if row := rowOf(t, out, "web", "template "+staleDest+" (task main)"); code != 0 || !strings.Contains(row, "denied: this token may not read allocation files") {
		t.Errorf("watches without read-fs: exit %d, row %q\n%s", code, row, errOut)
	}

	rerender(t, c, allocsOf(t, c, "web")[0].ID)
	if list := staleListing(t, ctx, withFS); len(staleIDs(list)) != 1 {
		t.Errorf("stale with read-fs lists %v, want the re-rendered allocation", staleIDs(list))
	}
	code, out, errOut = withFS.run(ctx, "watches", "-explain", "web")
	if code != 0 || !strings.Contains(out, "Allocation Files = readable by this token") {
		t.Errorf("watches -explain with read-fs: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestWatchesExplainRendered explains a job that opts in to rollouts on re-renders: its
// consent, render interval, the templates followed (by file, by task events) and those
// that cannot be (change_mode restart, a destination outside the allocation directory).
func TestWatchesExplainRendered(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, renderedJob())
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "watches", "-explain", "web-rendered")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, s := range []string{
		`Consent          = yes, to Nomad's re-renders of its templates: nomad-restart.on-change = "rendered" in the job's meta`,
		"Render Interval  = 10s",
		"Followed by Renders (files read every 10s)",
		"file main/local/app.env (its modification time)",
		"task events (change_mode signal)",
		"Not Followed", "local/restart.env", "change_mode restart: Nomad restarts the task itself",
		"/etc/app.conf", "outside the allocation directory",
		"Allocation Files = readable by this token",
		`or a re-render of a template it follows, the agent restarts the allocations of group "web" running a template re-rendered after their tasks started (files read every 10s), in batches of 1`,
	} {
		if !strings.Contains(out, s) {
			t.Errorf("explain lacks %q:\n%s", s, out)
		}
	}
	code, out, _ = e.run(ctx, "watches")
	for _, s := range []string{"template local/app.env (task main)", "template /etc/app.conf (task main)", "yes: by its re-renders, task events (change_mode signal)", "no: its re-renders are not followed: change_mode restart"} {
		if !strings.Contains(out, s) || code != 0 {
			t.Errorf("watches lacks %q:\n%s", s, out)
		}
	}
}

// renderedJob opts in to rollouts on re-renders (every 10s) with a template of each kind:
// noop (followed by its file), signal (by task events), restart and one written outside
// the allocation directory (neither followed).
func renderedJob() *api.Job {
	job := templated(simpleJob("web-rendered", api.JobTypeService, 2), "local/app.env", `{{ with secret "secret/app" }}{{ .Data.x }}{{ end }}`, "noop")
	job = templated(job, "local/sig.conf", `{{ key "web/sig" }}`, "signal")
	job.TaskGroups[0].Tasks[0].Templates[1].ChangeSignal = new("SIGHUP")
	job = templated(job, "local/restart.env", `{{ key "web/restart" }}`, "restart")
	job = templated(job, "/etc/app.conf", `{{ key "web/etc" }}`, "noop")
	job.Meta = map[string]string{onchange.KeyOnChange: string(onchange.ConsentRendered), onchange.KeyRenderInterval: "10s"}
	return job
}

func TestParseRunArgsStaleOnly(t *testing.T) {
	o, err := parseRunArgs([]string{"-stale-only", "-on-error=fail", "web"}, false)
	if err != nil || !o.staleOnly || o.job != "web" || o.spec.OnlyAllocs != nil {
		t.Fatalf("run -stale-only web: %+v, %v", o, err)
	}
	for _, args := range [][]string{
		{"-stale-only", "-jobs", `Type == "service"`},
		{"-stale-only", "-at", "02:00", "web"},
	} {
		if _, err := parseRunArgs(args, false); err == nil || !strings.Contains(err.Error(), "-stale-only cannot be used with") {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}
