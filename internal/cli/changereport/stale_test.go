package changereport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// fakeFiles is a JobFiles: allocations as given, files read from times, or the error
// of err for an allocation (nil: read). It counts the reads in flight at once.
type fakeFiles struct {
	allocs []*restart.Alloc
	times  map[string]map[string]time.Time
	err    func(allocID string) error

	mu      sync.Mutex
	reads   []string
	reading simtest.Overlap
}

func (f *fakeFiles) JobAllocations(context.Context, string, string) ([]*restart.Alloc, uint64, error) {
	return f.allocs, 0, nil
}

func (f *fakeFiles) FileTimes(ctx context.Context, allocID string, paths []string) (map[string]time.Time, error) {
	defer f.reading.Enter()()
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
	got, err := ReadStale(context.Background(), f, job, now)
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

// TestReadStaleBoundsItsReads checks that at most staleFileReads listings are in flight,
// each forwarded by a server to an allocation's client.
func TestReadStaleBoundsItsReads(t *testing.T) {
	job, f, now := staleFixture()
	f.allocs, f.times = nil, map[string]map[string]time.Time{}
	for i := range 20 {
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		f.allocs = append(f.allocs, &restart.Alloc{ID: id, Group: "web", ClientStatus: restart.ClientRunning, DesiredStatus: restart.DesiredRun})
		f.times[id] = map[string]time.Time{"main/local/app.env": now}
	}
	if _, err := ReadStale(context.Background(), f, job, now); err != nil || len(f.reads) != 20 {
		t.Fatalf("read the files of %d allocations, err %v; want 20", len(f.reads), err)
	}
	if most := f.reading.Most(); most > staleFileReads || most < 2 {
		t.Errorf("%d reads in flight at once, want 2 to %d", most, staleFileReads)
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
			got, err := ReadStale(context.Background(), f, job, now)
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
	denied := func(ns string) StaleJob { return StaleJob{Namespace: ns, JobID: "x", FilesDenied: true} }
	cases := []struct {
		name string
		list []StaleJob
		want string
	}{
		{"nothing denied", []StaleJob{{Namespace: "default", filesRead: true}}, ""},
		{"no file to read", []StaleJob{{Namespace: "default"}}, ""},
		{"every read denied", []StaleJob{denied("default"), denied("prod"), denied("default")}, `in namespace "default", "prod", and stale compares`},
		{"another job read", []StaleJob{denied("prod"), {Namespace: "default", filesRead: true}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := AllFilesDenied(tc.list)
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
	web := StaleJob{Namespace: "default", JobID: "web", Allocs: []StaleAlloc{{
		ID: "aaaaaaaa-0000-4000-8000-000000000001", Group: "web", StaleFor: 90 * time.Second,
		Templates: []StaleTemplate{{Task: "main", Destination: "local/app.env", By: onchange.FollowFile, RenderedAt: at, TaskStartedAt: at.Add(-time.Hour)}},
	}}, NotFollowed: []NotFollowed{{Group: "web", Task: "main", Template: 1, Destination: "local/r.conf", Reason: "change_mode restart: Nomad restarts the task itself"}}, followed: 1}
	prod := web
	prod.Namespace, prod.NotFollowed = "prod", nil
	bare := StaleJob{Namespace: "default", JobID: "bare"}
	cases := []struct {
		name      string
		list      []StaleJob
		namespace string
		named     bool
		want      []string
		not       []string
	}{
		{"no job", nil, "", false, []string{`No job with templates in namespace "default"`}, nil},
		{"stale", []StaleJob{web}, "", false, []string{
			`Job "web" (namespace "default")`, "aaaaaaaa  web    main  local/app.env  file", "1m30s",
			"Not Followed", "local/r.conf  change_mode restart\n",
			"1 allocation of 1 job run with templates re-rendered after their tasks started. Restart only those with:\n    nomad-restart run -stale-only web\n",
		}, []string{"Nomad restarts the task itself"}},
		{"other namespaces", []StaleJob{web, prod}, "*", false, []string{
			"2 allocations of 2 jobs", "nomad-restart run -stale-only -namespace default web", "nomad-restart run -stale-only -namespace prod web",
		}, nil},
		{"none stale, a named job without templates", []StaleJob{bare}, "", true, []string{
			`Job "bare" has no template`, "No stale allocations: no running allocation of the 1 job read",
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			PrintStale(&b, tc.list, tc.namespace, tc.named, false)
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
