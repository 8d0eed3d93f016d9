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
