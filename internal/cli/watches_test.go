package cli

import (
	"context"
	"encoding/json"
	"fmt"
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
