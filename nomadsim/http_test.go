package nomadsim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestNotFoundTexts(t *testing.T) {
	c, _ := startCluster(t, Options{})
	cases := []struct{ path, body string }{
		{"/v1/job/nosuchjob", "job not found"},
		{"/v1/allocation/0c167182-0c38-d4a7-de65-1e23946d2e45", "alloc not found"},
		{"/v1/job/nosuchjob/allocations", "job not found"},
	}
	for _, tc := range cases {
		resp, body := get(t, c.Addr()+tc.path)
		if resp.StatusCode != 404 || body != tc.body {
			t.Errorf("%s: %d %q, want 404 %q", tc.path, resp.StatusCode, body, tc.body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("%s: content type %q", tc.path, ct)
		}
		if resp.Header.Get("X-Nomad-Index") == "" || resp.Header.Get("X-Nomad-KnownLeader") != "true" {
			t.Errorf("%s: missing meta headers %v", tc.path, resp.Header)
		}
	}
	resp, body := get(t, c.Addr()+"/v1/status/leader")
	if resp.StatusCode != 200 || !strings.HasPrefix(body, `"`) {
		t.Errorf("leader: %d %s", resp.StatusCode, body)
	}
}

func TestBlockingQuery(t *testing.T) {
	c, cl := startCluster(t, Options{})
	a := runningAlloc(t, c, cl, serviceJob("web", 1))
	waitLatestDeployment(t, cl, "web", "deployment successful", deploymentIs("successful"))
	_, meta, err := cl.Jobs().Allocations("web", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing changes: the query returns after wait with the same index.
	start := time.Now()
	_, meta2, err := cl.Jobs().Allocations("web", false, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if meta2.LastIndex != meta.LastIndex {
		t.Errorf("index moved from %d to %d without a change", meta.LastIndex, meta2.LastIndex)
	}
	if time.Since(start) < 200*time.Millisecond {
		t.Errorf("blocking query returned before its wait")
	}
	// A change fires it.
	done := make(chan uint64, 1)
	go func() {
		_, m, err := cl.Jobs().Allocations("web", false, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 10 * time.Second})
		if err != nil {
			done <- 0
			return
		}
		done <- m.LastIndex
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case idx := <-done:
		if idx <= meta.LastIndex {
			t.Errorf("blocking query answered index %d, not after %d", idx, meta.LastIndex)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocking query did not fire on a change")
	}
}

func TestChecksEndpointShape(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	tg := job.TaskGroups[0]
	tg.Services = []*api.Service{{Name: "web", PortLabel: "http", Provider: "nomad", Checks: []api.ServiceCheck{{Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	tg.Meta = map[string]string{`nomadsim.check.service: "web" check`: "pass_after=2s"}
	a := runningAlloc(t, c, cl, job)
	checks, err := cl.Allocations().Checks(a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 1 {
		t.Fatalf("checks: %+v", checks)
	}
	for id, chk := range checks {
		if chk.ID != id || chk.Mode != "healthiness" || chk.Group != "web.g[0]" || chk.Service != "web" || chk.Check != `service: "web" check` {
			t.Errorf("check shape %+v", chk)
		}
	}
	waitFor(t, "check success", func() bool {
		checks, _ := cl.Allocations().Checks(a.ID, nil)
		for _, chk := range checks {
			return chk.Status == "success" && chk.StatusCode == 200
		}
		return false
	})
	regs, _, err := cl.Allocations().Services(a.ID, nil)
	if err != nil || len(regs) != 1 {
		t.Fatalf("services %v %v", regs, err)
	}
	if want := "_nomad-task-" + a.ID + "-group-g-web-http"; regs[0].ID != want {
		t.Errorf("service ID %s, want %s", regs[0].ID, want)
	}
	// Raw shape: no Task field for a group service, as Nomad answers.
	_, body := get(t, c.Addr()+"/v1/client/allocation/"+a.ID+"/checks")
	var raw map[string]map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, m := range raw {
		for _, k := range []string{"Check", "Group", "ID", "Mode", "Output", "Service", "Status", "StatusCode", "Timestamp"} {
			if _, ok := m[k]; !ok {
				t.Errorf("missing %s in %v", k, m)
			}
		}
		if _, ok := m["Task"]; ok {
			t.Errorf("group check has a Task field")
		}
	}
}

func TestListFilters(t *testing.T) {
	c, cl := startCluster(t, Options{})
	runningAlloc(t, c, cl, serviceJob("web", 2))
	runningAlloc(t, c, cl, serviceJob("api", 1))
	stubs, _, err := cl.Allocations().List(&api.QueryOptions{Filter: `JobID == "web" and ClientStatus == "running"`})
	if err != nil {
		t.Fatal(err)
	}
	if len(stubs) != 2 {
		t.Errorf("filter kept %d allocations, want 2", len(stubs))
	}
	jobs, _, err := cl.Jobs().List(&api.QueryOptions{Filter: `Status == "running"`, Prefix: "we"})
	if err != nil || len(jobs) != 1 || jobs[0].ID != "web" {
		t.Errorf("jobs %v %v", jobs, err)
	}
	if _, _, err := cl.Allocations().List(&api.QueryOptions{Filter: `JobID ==`}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("bad filter: %v", err)
	}
	all, _, err := cl.Jobs().List(&api.QueryOptions{Namespace: "*"})
	if err != nil || len(all) != 2 {
		t.Errorf("all namespaces: %d %v", len(all), err)
	}
}

func TestJobIDWithSlash(t *testing.T) {
	c, cl := startCluster(t, Options{})
	runningAlloc(t, c, cl, serviceJob("batch/dispatch-1", 1))
	job, _, err := cl.Jobs().Info("batch/dispatch-1", nil)
	if err != nil || *job.ID != "batch/dispatch-1" {
		t.Fatalf("info: %v", err)
	}
	stubs, _, err := cl.Jobs().Allocations("batch/dispatch-1", false, nil)
	if err != nil || len(stubs) != 1 {
		t.Fatalf("allocations: %v", err)
	}
	if st := c.Stats(); st.Get("GET", "/v1/job/:id/allocations").Requests == 0 {
		t.Errorf("slashed ID not routed as a job sub-resource: %v", st.Keys())
	}
}

func TestNamespaces(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	job.Namespace = ptr("prod")
	if _, _, err := cl.Jobs().Register(job, nil); err == nil || !strings.Contains(err.Error(), "nonexistent namespace") {
		t.Errorf("register in a missing namespace: %v", err)
	}
	if _, err := cl.Namespaces().Register(&api.Namespace{Name: "prod"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitJobRunning(ctxT(t), "prod", "web"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Jobs().Info("web", nil); err == nil {
		t.Errorf("job visible in the default namespace")
	}
	if _, _, err := cl.Jobs().Info("web", &api.QueryOptions{Namespace: "prod"}); err != nil {
		t.Errorf("job in prod: %v", err)
	}
	nss, _, err := cl.Namespaces().List(nil)
	if err != nil || len(nss) != 2 {
		t.Errorf("namespaces %v %v", nss, err)
	}
	all, _, _ := cl.Jobs().List(&api.QueryOptions{Namespace: "*"})
	if len(all) != 1 || all[0].Namespace != "prod" {
		t.Errorf("jobs across namespaces %+v", all)
	}
}

func TestPlan(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 2)
	plan, _, err := cl.Jobs().Plan(job, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Diff == nil || plan.Diff.Type != "Added" || plan.Annotations.DesiredTGUpdates["g"].Place != 2 {
		t.Errorf("plan of a new job: %+v %+v", plan.Diff, plan.Annotations.DesiredTGUpdates["g"])
	}
	runningAlloc(t, c, cl, job)
	job.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	job.TaskGroups[0].Count = ptr(3)
	plan, _, err = cl.Jobs().Plan(job, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	du := plan.Annotations.DesiredTGUpdates["g"]
	if plan.Diff.Type != "Edited" || du.DestructiveUpdate != 2 || du.Place != 1 || plan.Diff.TaskGroups[0].Updates["create/destroy update"] != 2 {
		t.Errorf("plan of an update: %+v %+v", plan.Diff, du)
	}
	if st := c.Stats(); st.Mutations != 1 {
		t.Errorf("plans counted as mutations: %d", st.Mutations)
	}
}
