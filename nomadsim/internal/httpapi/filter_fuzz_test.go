package httpapi

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// FuzzListFilter applies any filter expression (what -filter and -jobs send) to a list of
// allocations and to a job, as the simulated list endpoints do: no panic or hang (a panic
// would leave a list handler's lock held and stall the whole simulation); an expression
// that cannot be read or applied is Nomad's 400.
func FuzzListFilter(f *testing.F) {
	for _, expr := range []string{
		`TaskGroup == "web"`, `ClientStatus == "running" and JobID == "web"`, `Meta.team == "core"`, `Meta.team === "core"`,
		`JobSummary.Summary.web.Running == 1`, `"nomad-restart.batch-size" in Meta`, `Name matches "^api-" and Priority == 70`,
		`TaskStates.app.State == "running"`, `Meta.team is not empty`, `Datacenters contains "dc1"`, `not (Priority > 50)`,
		`TaskGroups[0].Name == "web"`, `Update.MaxParallel == 1`, `JobID == "web" and Namespace == "default" and (x) or (true)`,
		`ID matches "("`, `Stop == false`, `ParentID == ""`, `CreateIndex > 1`, ``, `(`, `"`, "`",
	} {
		f.Add(expr)
	}
	job := api.NewServiceJob("web", "web", "global", 50)
	job.Meta = map[string]string{"team": "core"}
	job.TaskGroups = []*api.TaskGroup{api.NewTaskGroup("web", 2).AddTask(api.NewTask("app", "raw_exec"))}
	allocs := []allocStub{
		{AllocationListStub: &api.AllocationListStub{ID: "a1", JobID: "web", Namespace: "default", TaskGroup: "web", ClientStatus: "running",
			TaskStates: map[string]*api.TaskState{"app": {State: "running", StartedAt: time.Unix(1, 0)}}}},
		{AllocationListStub: &api.AllocationListStub{ID: "a2", JobID: "api", Namespace: "default", TaskGroup: "api", ClientStatus: "pending"}},
	}
	f.Fuzz(func(t *testing.T, expr string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := filterList(expr, allocs); err != nil {
				check400(t, expr, err)
			}
			datum, err := jobFilterDatum(job)
			if err != nil {
				t.Errorf("the job's filter view: %v", err)
				return
			}
			lf, err := newListFilter(expr)
			if err != nil {
				check400(t, expr, err)
				return
			}
			if _, err := lf.match(datum); err != nil {
				check400(t, expr, err)
			}
		}()
		// nomadsim shares no code with the product, the fuzz support included: its own bound.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("filter %q: no answer after 10s", expr)
		}
	})
}

func check400(t *testing.T, expr string, err error) {
	var rpc *rpcError
	if !errors.As(err, &rpc) || rpc.answer.Code != http.StatusBadRequest {
		t.Errorf("filter %q: %v (%T), want Nomad's 400", expr, err, err)
	}
}
