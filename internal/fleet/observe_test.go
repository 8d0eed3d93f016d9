package fleet

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestObserve(t *testing.T) {
	pendingJob := Job{Namespace: "default", JobID: "web", Status: JobPending}
	running := Job{Namespace: "default", JobID: "web", Status: JobRunning, RestartID: "r1"}
	waiting := Job{Namespace: "default", JobID: "web", Status: JobPending, BusyWith: "other", Reason: "waiting for restart other in progress on the job (-busy wait)"}
	child := func(s restart.Status) Observation {
		return Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: s}
	}
	tests := []struct {
		name       string
		busy       Busy
		job        Job
		obs        Observation
		wantStatus JobStatus
		wantReason string // a part of the job's Reason; "" means none
		wantBusy   string
	}{
		{"child started", BusyWait, pendingJob, child(restart.StatusPending), JobRunning, "", ""},
		{"child running", BusyWait, running, child(restart.StatusRunning), JobRunning, "", ""},
		{"child paused holds the job running", BusyWait, running, child(restart.StatusPaused), JobRunning, "", ""},
		{"child asking holds the job running", BusyWait, running, child(restart.StatusWaiting), JobRunning, "", ""},
		{"child succeeded", BusyWait, running, child(restart.StatusSucceeded), JobSucceeded, "", ""},
		{"child failed keeps its error", BusyWait, running, Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: restart.StatusFailed, ChildError: "alloc 3f2a did not become healthy"}, JobFailed, "did not become healthy", ""},
		{"child canceled", BusyWait, running, child(restart.StatusCanceled), JobCanceled, "", ""},
		{"child of a job that waited clears the wait", BusyWait, waiting, child(restart.StatusRunning), JobRunning, "", ""},
		{"busy under wait stays pending", BusyWait, pendingJob, Observation{Namespace: "default", JobID: "web", BusyWith: "other"}, JobPending, "waiting for restart other", "other"},
		{"busy under skip is skipped", BusySkip, pendingJob, Observation{Namespace: "default", JobID: "web", BusyWith: "other"}, JobSkipped, "restart other was in progress", ""},
		{"busy no more frees the job", BusyWait, waiting, Observation{Namespace: "default", JobID: "web"}, JobPending, "", ""},
		{"purged before its turn is skipped", BusyWait, pendingJob, Observation{Namespace: "default", JobID: "web", Purged: true}, JobSkipped, "purged", ""},
		{"purged while waiting is skipped", BusyWait, waiting, Observation{Namespace: "default", JobID: "web", Purged: true}, JobSkipped, "purged", ""},
		{"purged with a child running: the child decides", BusyWait, running, Observation{Namespace: "default", JobID: "web", Purged: true}, JobRunning, "", ""},
		{"our own child is not another restart", BusySkip, running, Observation{Namespace: "default", JobID: "web", BusyWith: "r1"}, JobRunning, "", ""},
		{"an ended job keeps its end", BusyWait, Job{Namespace: "default", JobID: "web", Status: JobSucceeded, RestartID: "r1"}, child(restart.StatusRunning), JobSucceeded, "", ""},
		{"a skipped job stays skipped", BusyWait, Job{Namespace: "default", JobID: "web", Status: JobSkipped, Reason: "the job was purged from Nomad before its turn"}, Observation{Namespace: "default", JobID: "web"}, JobSkipped, "purged", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Fleet{ID: "f1", Options: Options{Busy: tt.busy}, Jobs: []Job{{Namespace: "other", JobID: "web"}, tt.job}}
			if err := Observe(f, tt.obs); err != nil {
				t.Fatalf("Observe: %v", err)
			}
			got := f.Jobs[1]
			if got.Status != tt.wantStatus {
				t.Errorf("status = %s, want %s", got.Status, tt.wantStatus)
			}
			if (tt.wantReason == "") != (got.Reason == "") || !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("reason = %q, want one containing %q", got.Reason, tt.wantReason)
			}
			if got.BusyWith != tt.wantBusy {
				t.Errorf("BusyWith = %q, want %q", got.BusyWith, tt.wantBusy)
			}
			if tt.obs.RestartID != "" && got.RestartID != tt.obs.RestartID {
				t.Errorf("RestartID = %q, want %q", got.RestartID, tt.obs.RestartID)
			}
			if !reflect.DeepEqual(f.Jobs[0], Job{Namespace: "other", JobID: "web"}) {
				t.Errorf("the same job ID in another namespace changed: %+v", f.Jobs[0])
			}
		})
	}
}

// TestObserveRefuses holds the exactly-once rules: a fleet's record is not written when two
// drivers disagree about a job.
func TestObserveRefuses(t *testing.T) {
	tests := []struct {
		name string
		job  Job
		obs  Observation
		want string
	}{
		{"a job outside the selection", Job{Namespace: "default", JobID: "web"}, Observation{Namespace: "default", JobID: "api", Purged: true}, "not in its selection"},
		{"a second child", Job{Namespace: "default", JobID: "web", Status: JobRunning, RestartID: "r1"}, Observation{Namespace: "default", JobID: "web", RestartID: "r2", ChildStatus: restart.StatusRunning}, "restarted once per fleet"},
		{"a second child after the first ended", Job{Namespace: "default", JobID: "web", Status: JobFailed, RestartID: "r1"}, Observation{Namespace: "default", JobID: "web", RestartID: "r2", ChildStatus: restart.StatusRunning}, "restarted once per fleet"},
		{"a child for a skipped job", Job{Namespace: "default", JobID: "web", Status: JobSkipped}, Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: restart.StatusRunning}, "before its turn"},
		{"an unknown child status", Job{Namespace: "default", JobID: "web", Status: JobPending}, Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: "lost"}, "unknown child restart status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Fleet{ID: "f1", Jobs: []Job{tt.job}}
			err := Observe(f, tt.obs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Observe error = %v, want one containing %q", err, tt.want)
			}
			if !reflect.DeepEqual(f.Jobs[0], tt.job) {
				t.Errorf("a refused observation changed the job: %+v, was %+v", f.Jobs[0], tt.job)
			}
		})
	}
}
