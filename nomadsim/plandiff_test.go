package nomadsim

import (
	"testing"
)

// TestPlanDiffTaskDetail: a plan's diff names the edited task, its annotation and the
// driver config fields that changed, as Nomad's job diff does.
func TestPlanDiffTaskDetail(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	runningAlloc(t, c, cl, job)
	job.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sh", "args": []string{"-c", "sleep 3600"}}
	resp, _, err := cl.Jobs().Plan(job, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Diff == nil || len(resp.Diff.TaskGroups) != 1 {
		t.Fatalf("diff %+v", resp.Diff)
	}
	tasks := resp.Diff.TaskGroups[0].Tasks
	if len(tasks) != 1 || tasks[0].Name != "main" || tasks[0].Type != "Edited" ||
		len(tasks[0].Annotations) != 1 || tasks[0].Annotations[0] != "forces create/destroy update" {
		t.Fatalf("task diffs %+v", tasks)
	}
	if len(tasks[0].Objects) != 1 || tasks[0].Objects[0].Name != "Config" {
		t.Fatalf("task objects %+v", tasks[0].Objects)
	}
	f := tasks[0].Objects[0].Fields
	if len(f) != 1 || f[0].Name != "args[1]" || f[0].Type != "Edited" || f[0].Old != "sleep 100000" || f[0].New != "sleep 3600" {
		for _, x := range f {
			t.Logf("field %+v", *x)
		}
		t.Fatal("config field diff is not args[1]: sleep 100000 => sleep 3600")
	}
}
