package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
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
func staleListing(t *testing.T, ctx context.Context, e cliEnv, args ...string) []staleJob {
	t.Helper()
	code, out, errOut := e.run(ctx, append([]string{"stale", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("stale -json: exit %d\n%s\n%s", code, out, errOut)
	}
	var list []staleJob
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("stale -json: %v\n%s", err, out)
	}
	return list
}

// staleIDs are the IDs of the stale allocations of the listing, sorted.
func staleIDs(list []staleJob) []string {
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
	c := startSim(t, nomadsim.Options{ACLs: true})
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

// fakeFiles is a staleCluster: allocations as given, files read from times, or the error
// of err for an allocation (nil: read). It counts the reads in flight at once.
type fakeFiles struct {
	allocs []*restart.Alloc
	times  map[string]map[string]time.Time
	err    func(allocID string) error

	mu            sync.Mutex
	reads         []string
	inFlight, top atomic.Int32
}

func (f *fakeFiles) JobAllocations(context.Context, string, string) ([]*restart.Alloc, uint64, error) {
	return f.allocs, 0, nil
}

func (f *fakeFiles) FileTimes(ctx context.Context, allocID string, paths []string) (map[string]time.Time, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		top := f.top.Load()
		if n <= top || f.top.CompareAndSwap(top, n) {
			break
		}
	}
	time.Sleep(time.Millisecond) // let the reads overlap
	f.mu.Lock()
	f.reads = append(f.reads, allocID)
	f.mu.Unlock()
	if f.err != nil {
		if err := f.err(allocID); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return f.times[allocID], nil
}

// staleFixture is a job with group web (a noop template, a signal one, a restart one) of
// allocations a (stale by its file), b (stale by a task event), c (up to date) and d
// (stopped), seen at now.
func staleFixture() (onchange.JobSpec, *fakeFiles, time.Time) {
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := started.Add(time.Hour)
	job := onchange.JobSpec{ID: "web", Groups: []onchange.GroupSpec{{Name: "web", Tasks: []onchange.TaskSpec{{Name: "main", Templates: []onchange.TemplateSpec{
		{DestPath: "local/app.env", ChangeMode: "noop"},
		{DestPath: "local/sig.conf", ChangeMode: "signal"},
		{DestPath: "local/r.conf", ChangeMode: "restart"},
	}}}}}}
	task := func(events ...restart.TaskEvent) map[string]restart.TaskState {
		return map[string]restart.TaskState{"main": {State: restart.TaskRunning, StartedAt: started, Events: events}}
	}
	alloc := func(id string, tasks map[string]restart.TaskState) *restart.Alloc {
		return &restart.Alloc{ID: id, Name: "web.web[" + id[:1] + "]", Group: "web", ClientStatus: restart.ClientRunning, DesiredStatus: restart.DesiredRun, Tasks: tasks}
	}
	stopped := alloc("dddddddd-0000-4000-8000-000000000004", task())
	stopped.DesiredStatus = "stop"
	f := &fakeFiles{
		allocs: []*restart.Alloc{
			alloc("aaaaaaaa-0000-4000-8000-000000000001", task()),
			alloc("bbbbbbbb-0000-4000-8000-000000000002", task(restart.TaskEvent{Type: "Signaling", Message: "Template re-rendered", Time: started.Add(20 * time.Minute)})),
			alloc("cccccccc-0000-4000-8000-000000000003", task()),
			stopped,
		},
		times: map[string]map[string]time.Time{
			"aaaaaaaa-0000-4000-8000-000000000001": {"main/local/app.env": started.Add(30 * time.Minute)},
			"bbbbbbbb-0000-4000-8000-000000000002": {"main/local/app.env": started.Add(-time.Second)},
			"cccccccc-0000-4000-8000-000000000003": {"main/local/app.env": started.Add(-time.Second)},
		},
	}
	return job, f, now
}

func TestReadStale(t *testing.T) {
	job, f, now := staleFixture()
	got, err := readStale(context.Background(), f, job, now)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range got.Allocs {
		ids = append(ids, a.ID[:1]+":"+string(a.Templates[0].By)+":"+a.StaleFor.String())
	}
	if want := []string{"a:file:30m0s", "b:events:40m0s"}; !slices.Equal(ids, want) {
		t.Errorf("stale = %v, want %v", ids, want)
	}
	if len(got.NotFollowed) != 1 || got.NotFollowed[0].Group != "web" || got.NotFollowed[0].Destination != "local/r.conf" || got.FilesDenied || !got.filesRead {
		t.Errorf("job = %+v", got)
	}
	slices.Sort(f.reads)
	if want := []string{"aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002", "cccccccc-0000-4000-8000-000000000003"}; !slices.Equal(f.reads, want) {
		t.Errorf("files read of %v, want those of the running allocations %v", f.reads, want)
	}
}

// TestReadStaleFileErrors checks each answer of a file read: a denial is reported, not
// failed, and the task events still judged; an allocation gone is left out; any other
// error fails with the job and the allocation named.
func TestReadStaleFileErrors(t *testing.T) {
	cases := []struct {
		name    string
		err     error
		denied  bool
		stale   int
		failure string
	}{
		{"denied", fmt.Errorf("listing: %w", cluster.ErrPermissionDenied), true, 1, ""},
		{"gone", fmt.Errorf("listing: %w", cluster.ErrAllocNotFound), false, 2, ""},
		{"other", errors.New("connection reset"), false, 0, `reading the template files of job "web": allocation cccccccc: connection reset; check that the allocations' clients are connected`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job, f, now := staleFixture()
			f.err = func(id string) error {
				if tc.name == "denied" || strings.HasPrefix(id, "c") {
					return tc.err
				}
				return nil
			}
			got, err := readStale(context.Background(), f, job, now)
			if tc.failure != "" {
				if err == nil || !strings.Contains(err.Error(), tc.failure) {
					t.Fatalf("err = %v, want %q", err, tc.failure)
				}
				return
			}
			if err != nil || got.FilesDenied != tc.denied || len(got.Allocs) != tc.stale {
				t.Errorf("err %v, denied %v, %d stale; want %v and %d", err, got.FilesDenied, len(got.Allocs), tc.denied, tc.stale)
			}
		})
	}
}

func TestAllFilesDenied(t *testing.T) {
	denied := func(ns string) staleJob { return staleJob{Namespace: ns, JobID: "x", FilesDenied: true} }
	cases := []struct {
		name string
		list []staleJob
		want string
	}{
		{"nothing denied", []staleJob{{Namespace: "default", filesRead: true}}, ""},
		{"no file to read", []staleJob{{Namespace: "default"}}, ""},
		{"every read denied", []staleJob{denied("default"), denied("prod"), denied("default")}, `in namespace "default", "prod", and stale compares`},
		{"another job read", []staleJob{denied("prod"), {Namespace: "default", filesRead: true}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := allFilesDenied(tc.list)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "read-fs")):
				t.Errorf("err = %v, want %q and read-fs", err, tc.want)
			}
		})
	}
}

func TestPrintStale(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	web := staleJob{Namespace: "default", JobID: "web", Allocs: []staleAllocJSON{{
		ID: "aaaaaaaa-0000-4000-8000-000000000001", Group: "web", StaleFor: 90 * time.Second,
		Templates: []staleTemplateJSON{{Task: "main", Destination: "local/app.env", By: onchange.FollowFile, RenderedAt: at, TaskStartedAt: at.Add(-time.Hour)}},
	}}, NotFollowed: []notFollowedJSON{{Group: "web", Task: "main", Template: 1, Destination: "local/r.conf", Reason: "change_mode restart: Nomad restarts the task itself"}}, followed: 1}
	prod := web
	prod.Namespace, prod.NotFollowed = "prod", nil
	bare := staleJob{Namespace: "default", JobID: "bare"}
	cases := []struct {
		name      string
		list      []staleJob
		namespace string
		named     bool
		want      []string
		not       []string
	}{
		{"no job", nil, "", false, []string{`No job with templates in namespace "default"`}, nil},
		{"stale", []staleJob{web}, "", false, []string{
			`Job "web" (namespace "default")`, "aaaaaaaa  web    main  local/app.env  file", "1m30s",
			"Not Followed", "local/r.conf  change_mode restart\n",
			"1 allocation of 1 job run with templates re-rendered after their tasks started. Restart only those with:\n    nomad-restart run -stale-only web\n",
		}, []string{"Nomad restarts the task itself"}},
		{"other namespaces", []staleJob{web, prod}, "*", false, []string{
			"2 allocations of 2 jobs", "nomad-restart run -stale-only -namespace default web", "nomad-restart run -stale-only -namespace prod web",
		}, nil},
		{"none stale, a named job without templates", []staleJob{bare}, "", true, []string{
			`Job "bare" has no template`, "No stale allocations: no running allocation of the 1 job read",
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printStale(&b, tc.list, tc.namespace, tc.named, false)
			for _, s := range tc.want {
				if !strings.Contains(b.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, b.String())
				}
			}
			for _, s := range tc.not {
				if strings.Contains(b.String(), s) {
					t.Errorf("output has %q:\n%s", s, b.String())
				}
			}
		})
	}
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
