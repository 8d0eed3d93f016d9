package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func stub(ns, id string) *api.JobListStub {
	return &api.JobListStub{ID: id, Name: id, Namespace: ns, Type: "service", JobSummary: &api.JobSummary{JobID: id, Namespace: ns}}
}

func jobIn(ns, id string) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Namespace = &ns
	j.Version = new(uint64(2))
	j.ModifyIndex = new(uint64(40))
	j.TaskGroups = []*api.TaskGroup{api.NewTaskGroup("web", 2).AddTask(api.NewTask("app", "docker")).AddTask(api.NewTask("log", "docker"))}
	return j
}

func TestResolveJob(t *testing.T) {
	type listAnswer struct {
		code  int
		text  string
		stubs []*api.JobListStub
	}
	cases := []struct {
		name      string
		namespace string
		prefix    string
		list      listAnswer
		// jobs readable by "namespace/id"; others get 404 "job not found".
		jobs      map[string]*api.Job
		readCode  int // when set, every read answers this code with Nomad's text
		wantID    string
		wantNS    string
		wantErr   error
		wantMatch []string // AmbiguousJobError.Matches
		wantRead  string   // path and namespace of the read, "ns/id"
	}{
		{
			name: "unique prefix", namespace: "", prefix: "we",
			list:   listAnswer{stubs: []*api.JobListStub{stub("default", "web")}},
			jobs:   map[string]*api.Job{"default/web": jobIn("default", "web")},
			wantID: "web", wantNS: "default", wantRead: "default/web",
		},
		{
			name: "exact match wins over longer IDs", namespace: "default", prefix: "web",
			list:   listAnswer{stubs: []*api.JobListStub{stub("default", "web-api"), stub("default", "web")}},
			jobs:   map[string]*api.Job{"default/web": jobIn("default", "web")},
			wantID: "web", wantNS: "default", wantRead: "default/web",
		},
		{
			name: "prefix of several jobs is ambiguous", namespace: "default", prefix: "we",
			list:      listAnswer{stubs: []*api.JobListStub{stub("default", "web"), stub("default", "web-api")}},
			wantMatch: []string{"default/web", "default/web-api"},
		},
		{
			name: "same ID in two namespaces under * is ambiguous", namespace: "*", prefix: "web",
			list:      listAnswer{stubs: []*api.JobListStub{stub("prod", "web"), stub("dev", "web")}},
			wantMatch: []string{"dev/web", "prod/web"},
		},
		{
			name: "unique across namespaces resolves in the job's namespace", namespace: "*", prefix: "bat",
			list:   listAnswer{stubs: []*api.JobListStub{stub("prod", "batcher")}},
			jobs:   map[string]*api.Job{"prod/batcher": jobIn("prod", "batcher")},
			wantID: "batcher", wantNS: "prod", wantRead: "prod/batcher",
		},
		{
			name: "no match", namespace: "", prefix: "nope",
			list:    listAnswer{stubs: []*api.JobListStub{}},
			wantErr: ErrJobNotFound,
		},
		{
			name: "list denied: the prefix is the literal ID", namespace: "prod", prefix: "web",
			list:   listAnswer{code: 403, text: "Permission denied"},
			jobs:   map[string]*api.Job{"prod/web": jobIn("prod", "web")},
			wantID: "web", wantNS: "prod", wantRead: "prod/web",
		},
		{
			name: "list denied and a mere prefix: job not found", namespace: "", prefix: "we",
			list:    listAnswer{code: 403, text: "Permission denied"},
			wantErr: ErrJobNotFound, wantRead: "default/we",
		},
		{
			name: "read denied", namespace: "", prefix: "web",
			list:     listAnswer{stubs: []*api.JobListStub{stub("default", "web")}},
			readCode: 403, wantErr: ErrPermissionDenied, wantRead: "default/web",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
				ns := r.URL.Query().Get("namespace")
				if ns == "" {
					ns = "default"
				}
				switch {
				case r.URL.Path == "/v1/jobs":
					if tc.list.code != 0 {
						plain(w, tc.list.code, tc.list.text)
						return
					}
					jsonAt(w, 28, tc.list.stubs)
				case strings.HasPrefix(r.URL.Path, "/v1/job/"):
					if tc.readCode == 403 {
						plain(w, 403, "Permission denied")
						return
					}
					j, ok := tc.jobs[ns+"/"+strings.TrimPrefix(r.URL.Path, "/v1/job/")]
					if !ok {
						plain(w, 404, "job not found")
						return
					}
					jsonAt(w, 28, j)
				default:
					plain(w, 404, "Invalid URL")
				}
			})
			job, err := n.ResolveJob(context.Background(), tc.namespace, tc.prefix)

			reqs := rec.seen()
			if len(reqs) == 0 || reqs[0].URL.Path != "/v1/jobs" {
				t.Fatalf("first request should list jobs, got %v", reqs)
			}
			q := reqs[0].URL.Query()
			if q.Get("prefix") != tc.prefix || q.Get("per_page") != "20" || q.Get("namespace") != tc.namespace {
				t.Fatalf("list query = %v", q)
			}
			if tc.wantRead != "" {
				if len(reqs) != 2 {
					t.Fatalf("want a list and a read, got %d requests", len(reqs))
				}
				ns := reqs[1].URL.Query().Get("namespace")
				if ns == "" {
					ns = "default"
				}
				if got := ns + "/" + strings.TrimPrefix(reqs[1].URL.Path, "/v1/job/"); got != tc.wantRead {
					t.Fatalf("read %s, want %s", got, tc.wantRead)
				}
			} else if len(reqs) != 1 {
				t.Fatalf("want the list only, got %d requests", len(reqs))
			}

			if tc.wantMatch != nil {
				var amb *AmbiguousJobError
				if !errors.As(err, &amb) {
					t.Fatalf("want AmbiguousJobError, got %v", err)
				}
				if !slices.Equal(amb.Matches, tc.wantMatch) || amb.Prefix != tc.prefix {
					t.Fatalf("matches %v, want %v", amb.Matches, tc.wantMatch)
				}
				return
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("want %v, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if job.ID != tc.wantID || job.Namespace != tc.wantNS || job.Version != 2 || len(job.Groups) != 1 ||
				!slices.Equal(job.Groups[0].Tasks, []string{"app", "log"}) {
				t.Fatalf("got %+v", job)
			}
			if n.Region() != "global" {
				t.Fatalf("region not learned from the job: %q", n.Region())
			}
		})
	}
}

func TestResolveJobKeepsNomadsText(t *testing.T) {
	list, read := loadExchange(t, "53-acl-no-token-jobs"), loadExchange(t, "16-job-unknown")
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs" {
			list.write(w)
			return
		}
		read.write(w)
	})
	_, err := n.ResolveJob(context.Background(), "", "nosuchjob")
	if !errors.Is(err, ErrJobNotFound) || !strings.Contains(err.Error(), "job not found") || !strings.Contains(err.Error(), `"nosuchjob"`) {
		t.Fatalf("got %v", err)
	}
}

func TestRecordedJobReads(t *testing.T) {
	ex := map[string]exchange{
		"/v1/jobs":                       loadExchange(t, "07-jobs-prefix"),
		"/v1/job/sleepy":                 loadExchange(t, "09-job-read"),
		"/v1/job/sleepy/versions":        loadExchange(t, "10-job-versions"),
		"/v1/job/sleepy/allocations":     loadExchange(t, "11-job-allocations"),
		"/v1/job/sleepy/deployments":     loadExchange(t, "14-job-deployments"),
		"/v1/job/impossible/evaluations": loadExchange(t, "33-job-evaluations-blocked"),
	}
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		e, ok := ex[r.URL.Path]
		if !ok {
			plain(w, 404, "Invalid URL")
			return
		}
		e.write(w)
	})
	ctx := context.Background()

	job, err := n.ResolveJob(ctx, "", "sle")
	if err != nil || job.ID != "sleepy" || job.Groups[0].Count != 3 {
		t.Fatalf("ResolveJob: %+v, %v", job, err)
	}
	versions, err := n.JobVersions(ctx, "default", "sleepy")
	if err != nil || len(versions) != 1 || versions[0] == nil || versions[0].Groups[0].Name != "g" {
		t.Fatalf("JobVersions: %+v, %v", versions, err)
	}
	allocs, idx, err := n.JobAllocations(ctx, "default", "sleepy")
	if err != nil || idx != 0 || len(allocs) != 3 { // streamed: no index
		t.Fatalf("JobAllocations: %d allocs at %d, %v", len(allocs), idx, err)
	}
	for i, a := range allocs {
		if a.Tasks["main"].State != "running" || a.JobVersion != 0 || a.Group != "g" {
			t.Fatalf("alloc %d: %+v", i, a)
		}
		if i > 0 && allocs[i-1].CreateIndex < a.CreateIndex {
			t.Fatalf("not newest first: %d before %d", allocs[i-1].CreateIndex, a.CreateIndex)
		}
	}
	dep, err := n.ActiveDeployment(ctx, "default", "sleepy")
	if err != nil || dep != nil {
		t.Fatalf("a successful deployment is not active: %+v, %v", dep, err)
	}
	for _, r := range rec.seen() {
		switch r.URL.Path {
		case "/v1/job/sleepy/versions":
			if r.URL.Query().Get("diffs") != "false" {
				t.Errorf("versions asked with diffs: %v", r.URL.Query())
			}
		case "/v1/job/sleepy/allocations", "/v1/job/sleepy/deployments":
			if r.URL.Query().Get("all") != "true" {
				t.Errorf("%s without all=true", r.URL.Path)
			}
		}
	}
}

func TestActiveDeployment(t *testing.T) {
	for _, tc := range []struct {
		statuses []string
		want     string
	}{
		{nil, ""},
		{[]string{"successful", "failed", "cancelled"}, ""},
		{[]string{"successful", "running"}, "running"},
		{[]string{"paused"}, "paused"},
		{[]string{"pending"}, "pending"},
		{[]string{"blocked", "successful"}, "blocked"},
	} {
		t.Run(strings.Join(tc.statuses, ","), func(t *testing.T) {
			var deps []*api.Deployment
			for i, s := range tc.statuses {
				deps = append(deps, &api.Deployment{ID: "d" + itoa(uint64(i)), Status: s, CreateIndex: uint64(10 - i)})
			}
			n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { jsonAt(w, 10, deps) })
			got, err := n.ActiveDeployment(context.Background(), "default", "web")
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if got != nil {
					t.Fatalf("got %+v, want none", got)
				}
				return
			}
			if got == nil || got.Status != tc.want || got.ID == "" {
				t.Fatalf("got %+v, want status %s", got, tc.want)
			}
		})
	}
}

func TestForceEvaluate(t *testing.T) {
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		jsonAt(w, 40, api.JobRegisterResponse{EvalID: "e1", EvalCreateIndex: 40})
	})
	if err := n.ForceEvaluate(context.Background(), "prod", "sys"); err != nil {
		t.Fatal(err)
	}
	reqs := rec.seen()
	if len(reqs) != 1 || reqs[0].Method != http.MethodPut || reqs[0].URL.Path != "/v1/job/sys/evaluate" ||
		reqs[0].URL.Query().Get("namespace") != "prod" {
		t.Fatalf("requests: %v", reqs)
	}
	var body api.JobEvaluateRequest
	if err := json.Unmarshal([]byte(rec.body(0)), &body); err != nil || !body.EvalOptions.ForceReschedule || body.JobID != "sys" {
		t.Fatalf("body %s: %v", rec.body(0), err)
	}
}
