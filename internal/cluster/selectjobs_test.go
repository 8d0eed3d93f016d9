package cluster_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// metaJob is serviceJob with its own meta and priority.
func metaJob(ns, id string, priority int, meta map[string]string) *api.Job {
	j := serviceJob(ns, id, 1)
	j.Priority = &priority
	j.Meta = meta
	return j
}

// stubIDs names the stubs namespace/ID, in their order.
func stubIDs(stubs []cluster.JobStub) []string {
	out := make([]string, 0, len(stubs))
	for _, s := range stubs {
		out = append(out, s.Namespace+"/"+s.ID)
	}
	return out
}

func TestSelectJobs(t *testing.T) {
	sim := startSim(t, nomadsim.Options{ACLs: true})
	createNamespaces(t, sim, "team")
	core := map[string]string{"team": "core"}
	simtest.RegisterRunning(t, sim,
		metaJob("default", "api-a", 50, map[string]string{"team": "core", "nomad-restart.batch-size": "2"}),
		metaJob("default", "api-b", 70, core),
		metaJob("default", "web", 50, map[string]string{"team": "front"}),
		serviceJob("default", "plain", 1), // no meta at all
		metaJob("team", "a-svc", 50, core))
	// A periodic job launches others; Nomad lists it with its meta all the same.
	cron := metaJob("team", "cron", 50, core)
	cron.Type = new(api.JobTypeBatch)
	cron.Periodic = &api.PeriodicConfig{Spec: new("@hourly")}
	if _, err := sim.RegisterJob(cron); err != nil {
		t.Fatalf("registering %s: %v", *cron.ID, err)
	}
	ctx := testCtx(t)
	n := newNomad(t, sim, sim.BootstrapToken())

	cases := []struct {
		namespace, filter string
		want              []string
	}{
		{"default", `Meta.team == "core"`, []string{"default/api-a", "default/api-b"}},
		// Every namespace: by namespace, then ID (the api client answers by ID alone).
		{"*", `Meta.team == "core"`, []string{"default/api-a", "default/api-b", "team/a-svc", "team/cron"}},
		{"*", "", []string{"default/api-a", "default/api-b", "default/plain", "default/web", "team/a-svc", "team/cron"}},
		{"*", `Type == "batch"`, []string{"team/cron"}},
		{"default", `Name matches "^api-" and Priority == 70`, []string{"default/api-b"}},
		{"default", `Meta.team != "core"`, []string{"default/plain", "default/web"}}, // no meta: no team
		{"default", `"nomad-restart.batch-size" in Meta`, []string{"default/api-a"}},
		{"*", `Meta.team == "nobody"`, []string{}},
	}
	for _, tc := range cases {
		got, err := n.SelectJobs(ctx, tc.namespace, tc.filter)
		if err != nil {
			t.Errorf("SelectJobs(%q, %q): %v", tc.namespace, tc.filter, err)
			continue
		}
		if ids := stubIDs(got); !reflect.DeepEqual(ids, tc.want) {
			t.Errorf("SelectJobs(%q, %q) = %v, want %v", tc.namespace, tc.filter, ids, tc.want)
		}
	}

	got, err := n.SelectJobs(ctx, "*", `Meta.team == "core"`)
	if err != nil {
		t.Fatal(err)
	}
	want := []cluster.JobStub{
		{Namespace: "default", ID: "api-a", Name: "api-a", Type: "service", Priority: 50, Status: "running",
			Meta: map[string]string{"team": "core", "nomad-restart.batch-size": "2"}},
		{Namespace: "default", ID: "api-b", Name: "api-b", Type: "service", Priority: 70, Status: "running", Meta: core},
		{Namespace: "team", ID: "a-svc", Name: "a-svc", Type: "service", Priority: 50, Status: "running", Meta: core},
		{Namespace: "team", ID: "cron", Name: "cron", Type: "batch", Priority: 50, Status: "running", Periodic: true, Meta: core},
	}
	for i := range got {
		// The index a job was last modified at is Nomad's, not the test's: it must be set.
		if got[i].JobModifyIndex == 0 {
			t.Errorf("stub %s/%s has no JobModifyIndex", got[i].Namespace, got[i].ID)
		}
		got[i].JobModifyIndex = 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SelectJobs stubs:\n got %+v\nwant %+v", got, want)
	}
	plain, err := n.SelectJobs(ctx, "default", `ID == "plain"`)
	if err != nil || len(plain) != 1 || plain[0].Meta != nil {
		t.Errorf("job without meta: %+v, %v; want one stub with nil Meta", plain, err)
	}
}

func TestSelectJobsRefusals(t *testing.T) {
	sim := startSim(t, nomadsim.Options{ACLs: true})
	createNamespaces(t, sim, "team")
	simtest.RegisterRunning(t, sim, metaJob("default", "web", 50, map[string]string{"team": "front"}), metaJob("team", "api", 50, map[string]string{"team": "core"}))
	ctx := testCtx(t)
	n := newNomad(t, sim, sim.BootstrapToken())

	filterErrors := []struct {
		filter, message string
	}{
		// Nomad cannot read the expression.
		{`Meta.team === "core"`, "failed to create result paginator: failed to read filter expression: 1:13 (12): no match found"},
		// Nomad cannot apply it: JobSummary is the stub's, and Nomad filters the jobs themselves.
		{`JobSummary.Summary.web.Running == 1`, `failed to read result page: error finding value in datum: /JobSummary/Summary/web/Running at part 0: couldn't find key: struct field with name "JobSummary"`},
	}
	for _, tc := range filterErrors {
		_, err := n.SelectJobs(ctx, "*", tc.filter)
		var fe *cluster.FilterError
		if !errors.As(err, &fe) {
			t.Errorf("SelectJobs(%q): %v (%T), want a *FilterError", tc.filter, err, err)
			continue
		}
		if fe.Expr != tc.filter || !strings.HasPrefix(fe.Message, tc.message) {
			t.Errorf("SelectJobs(%q): FilterError{Expr: %q, Message: %q}, want the expression and a message starting %q", tc.filter, fe.Expr, fe.Message, tc.message)
		}
		if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), fe.Message) {
			t.Errorf("SelectJobs(%q): error %q should be one line with Nomad's message", tc.filter, err)
		}
	}

	reader := newNomad(t, sim, simtest.Token(t, sim, "reader", `namespace "default" { capabilities = ["read-job"] }`))
	_, err := reader.SelectJobs(ctx, "default", `Meta.team == "front"`)
	var fe *cluster.FilterError
	if !errors.Is(err, cluster.ErrPermissionDenied) || errors.As(err, &fe) {
		t.Errorf("selecting without list-jobs: %v, want ErrPermissionDenied", err)
	}

	// A token that may list the default namespace only sees its jobs in every namespace.
	lister := newNomad(t, sim, simtest.Token(t, sim, "lister", `namespace "default" { capabilities = ["list-jobs"] }`))
	got, err := lister.SelectJobs(ctx, "*", `Meta.team is not empty`)
	if ids := stubIDs(got); err != nil || !reflect.DeepEqual(ids, []string{"default/web"}) {
		t.Errorf("selecting in every namespace with list-jobs in default only: %v, %v; want [default/web]", ids, err)
	}
}

func TestE2EListJobs(t *testing.T) {
	sim := startSim(t, nomadsim.Options{ACLs: true})
	createNamespaces(t, sim, "team")
	simtest.RegisterRunning(t, sim, serviceJob("default", "web", 1), serviceJob("default", "api", 1), serviceJob("team", "batch", 1))
	ctx := testCtx(t)
	n := newNomad(t, sim, sim.BootstrapToken())

	cases := []struct {
		namespace string
		want      []cluster.JobRef
	}{
		{"default", []cluster.JobRef{{Namespace: "default", ID: "api"}, {Namespace: "default", ID: "web"}}},
		{"team", []cluster.JobRef{{Namespace: "team", ID: "batch"}}},
		{"*", []cluster.JobRef{{Namespace: "default", ID: "api"}, {Namespace: "default", ID: "web"}, {Namespace: "team", ID: "batch"}}},
	}
	for _, tc := range cases {
		got, err := n.ListJobs(ctx, tc.namespace)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ListJobs(%q) = %+v, %v; want %+v", tc.namespace, got, err, tc.want)
		}
	}

	reader := newNomad(t, sim, simtest.Token(t, sim, "reader", `namespace "default" { capabilities = ["read-job"] }`))
	if _, err := reader.ListJobs(ctx, "default"); !errors.Is(err, cluster.ErrPermissionDenied) {
		t.Errorf("listing without list-jobs: %v, want ErrPermissionDenied", err)
	}
}
