package conformance

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestRegisterValidationListsNest: a job that fails validation is refused with a 500 whose
// text is Nomad's nested go-multierror lists (the job's, each group's, each task's), blank
// lines and all, and nothing is registered.
func TestRegisterValidationListsNest(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("invalid")
		job := sleepJob(id, 1)
		job.TaskGroups[0].Count = ptr(-1)
		job.TaskGroups[0].Tasks = []*api.Task{
			{Name: "t", Config: map[string]any{}},
			{Name: "", Driver: "raw_exec"},
		}
		empty := api.NewTaskGroup("api", 1)
		job.AddTaskGroup(empty)
		payload, err := json.Marshal(map[string]any{"Job": job})
		if err != nil {
			t.Fatal(err)
		}
		r := tg.do(t, "PUT", "/v1/jobs", tg.token, strings.NewReader(string(payload)))
		want := "2 errors occurred:\n" +
			"\t* Task group g validation failed: 4 errors occurred:\n" +
			"\t* Task group count can't be negative\n" +
			"\t* Task 2 missing name\n" +
			"\t* Task t validation failed: 1 error occurred:\n" +
			"\t* Missing task driver\n\n\n" +
			"\t* Task  validation failed: 1 error occurred:\n" +
			"\t* Missing task name\n\n\n\n\n" +
			"\t* Task group api validation failed: 1 error occurred:\n" +
			"\t* Missing tasks for task group\n\n\n\n"
		if r.status != 500 || string(r.body) != want {
			t.Errorf("PUT /v1/jobs = %d %q\nwant 500 %q", r.status, r.body, want)
		}
		if _, _, err := tg.api.Jobs().Info(id, nil); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("the refused job: %v, want it not found", err)
		}
	})
}
