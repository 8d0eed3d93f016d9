package nomadsim

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestJobStableAndRevert: the stability and revert endpoints through the official client,
// and Nomad's 400 when the body names another job than the path.
func TestJobStableAndRevert(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := serviceJob("rev", 1)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	job.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Jobs().Stable("rev", 0, true, nil); err != nil {
		t.Fatalf("marking version 0 stable: %v", err)
	}
	versions, _, _, err := cl.Jobs().Versions("rev", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		if *v.Version == 0 && (v.Stable == nil || !*v.Stable) {
			t.Errorf("version 0 not stable after Stable: %+v", v.Stable)
		}
	}
	if _, _, err := cl.Jobs().Revert("rev", 0, nil, nil, "", ""); err != nil {
		t.Fatalf("reverting to version 0: %v", err)
	}
	j, _, err := cl.Jobs().Info("rev", nil)
	if err != nil || *j.Version != 2 || len(j.TaskGroups[0].Tasks[0].Env) != 0 {
		t.Errorf("after revert: version %v env %v (%v); want version 2 with version 0's task", j.Version, j.TaskGroups[0].Tasks[0].Env, err)
	}

	for _, path := range []string{"/v1/job/rev/stable", "/v1/job/rev/revert"} {
		resp, err := http.Post(c.Addr()+path, "application/json", strings.NewReader(`{"JobID":"other"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || string(body) != "Job ID does not match" {
			t.Errorf("POST %s with another job ID: %d %q, want 400 %q", path, resp.StatusCode, body, "Job ID does not match")
		}
	}
}
