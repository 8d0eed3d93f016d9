package fleet

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestObserve holds what a fact observed of a job does to it in its fleet (Observe), what
// taking back a start does (Unstart), and the exactly-once rules: when two drivers
// disagree about a job, the call refuses and changes nothing, so the fleet's record is not
// written.
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
		unstart    bool   // Unstart rather than Observe
		wantErr    string // a part of the refusal; a refusal changes no job
	}{
		{"child started", BusyWait, pendingJob, child(restart.StatusPending), JobRunning, "", "", false, ""},
		{"child running", BusyWait, running, child(restart.StatusRunning), JobRunning, "", "", false, ""},
		{"child paused holds the job running", BusyWait, running, child(restart.StatusPaused), JobRunning, "", "", false, ""},
		{"child asking holds the job running", BusyWait, running, child(restart.StatusWaiting), JobRunning, "", "", false, ""},
		{"child succeeded", BusyWait, running, child(restart.StatusSucceeded), JobSucceeded, "", "", false, ""},
		{"child failed keeps its error", BusyWait, running, Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: restart.StatusFailed, ChildError: "alloc 3f2a did not become healthy"}, JobFailed, "did not become healthy", "", false, ""},
		{"child canceled", BusyWait, running, child(restart.StatusCanceled), JobCanceled, "", "", false, ""},
		{"child of a job that waited clears the wait", BusyWait, waiting, child(restart.StatusRunning), JobRunning, "", "", false, ""},
		{"busy under wait stays pending", BusyWait, pendingJob, Observation{Namespace: "default", JobID: "web", BusyWith: "other"}, JobPending, "waiting for restart other", "other", false, ""},
		{"busy under skip is skipped", BusySkip, pendingJob, Observation{Namespace: "default", JobID: "web", BusyWith: "other"}, JobSkipped, "restart other was in progress", "", false, ""},
		{"busy no more frees the job", BusyWait, waiting, Observation{Namespace: "default", JobID: "web"}, JobPending, "", "", false, ""},
		{"purged before its turn is skipped", BusyWait, pendingJob, Observation{Namespace: "default", JobID: "web", Purged: true}, JobSkipped, "purged", "", false, ""},
		{"purged while waiting is skipped", BusyWait, waiting, Observation{Namespace: "default", JobID: "web", Purged: true}, JobSkipped, "purged", "", false, ""},
		{"purged with a child running: the child decides", BusyWait, running, Observation{Namespace: "default", JobID: "web", Purged: true}, JobRunning, "", "", false, ""},
		{"our own child is not another restart", BusySkip, running, Observation{Namespace: "default", JobID: "web", BusyWith: "r1"}, JobRunning, "", "", false, ""},
		{"an ended job keeps its end", BusyWait, Job{Namespace: "default", JobID: "web", Status: JobSucceeded, RestartID: "r1"}, child(restart.StatusRunning), JobSucceeded, "", "", false, ""},
		{"a skipped job stays skipped", BusyWait, Job{Namespace: "default", JobID: "web", Status: JobSkipped, Reason: "the job was purged from Nomad before its turn"}, Observation{Namespace: "default", JobID: "web"}, JobSkipped, "purged", "", false, ""},
		// Unstart takes back the start of a job whose child (r1) could not be created.
		{name: "unstarted busy with another restart, -busy wait", unstart: true, busy: BusyWait, job: running, obs: Observation{Namespace: "default", JobID: "web", BusyWith: "r9"}, wantStatus: JobPending, wantReason: "waiting for restart r9", wantBusy: "r9"},
		{name: "unstarted as not recordable", unstart: true, busy: BusyWait, job: running, obs: Observation{Namespace: "default", JobID: "web", Failed: "permission denied"}, wantStatus: JobFailed, wantReason: "permission denied"},
		{name: "unstarted as purged meanwhile", unstart: true, busy: BusyWait, job: running, obs: Observation{Namespace: "default", JobID: "web", Purged: true}, wantStatus: JobSkipped, wantReason: "purged"},
		// Refusals: two drivers disagree about the job, so the fleet's record is not written.
		{name: "a job outside the selection", job: Job{Namespace: "default", JobID: "web"}, obs: Observation{Namespace: "default", JobID: "api", Purged: true}, wantErr: "not in its selection"},
		{name: "a second child", job: Job{Namespace: "default", JobID: "web", Status: JobRunning, RestartID: "r1"}, obs: Observation{Namespace: "default", JobID: "web", RestartID: "r2", ChildStatus: restart.StatusRunning}, wantErr: "restarted once per fleet"},
		{name: "a second child after the first ended", job: Job{Namespace: "default", JobID: "web", Status: JobFailed, RestartID: "r1"}, obs: Observation{Namespace: "default", JobID: "web", RestartID: "r2", ChildStatus: restart.StatusRunning}, wantErr: "restarted once per fleet"},
		{name: "a child for a skipped job", job: Job{Namespace: "default", JobID: "web", Status: JobSkipped}, obs: Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: restart.StatusRunning}, wantErr: "before its turn"},
		{name: "an unknown child status", job: Job{Namespace: "default", JobID: "web", Status: JobPending}, obs: Observation{Namespace: "default", JobID: "web", RestartID: "r1", ChildStatus: "lost"}, wantErr: "unknown child restart status"},
		{name: "unstarting a job that ended", unstart: true, job: Job{Namespace: "default", JobID: "web", Status: JobSucceeded, RestartID: "r1"}, obs: Observation{Namespace: "default", JobID: "web"}, wantErr: "only a start may be taken back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Fleet{ID: "f1", Options: Options{Busy: tt.busy}, Jobs: []Job{{Namespace: "other", JobID: "web"}, tt.job}}
			apply, what := Observe, "Observe"
			if tt.unstart {
				apply, what = Unstart, "Unstart"
			}
			err := apply(f, tt.obs)
			if !reflect.DeepEqual(f.Jobs[0], Job{Namespace: "other", JobID: "web"}) {
				t.Errorf("the same job ID in another namespace changed: %+v", f.Jobs[0])
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("%s error = %v, want one containing %q", what, err, tt.wantErr)
				}
				if !reflect.DeepEqual(f.Jobs[1], tt.job) {
					t.Errorf("a refused observation changed the job: %+v, was %+v", f.Jobs[1], tt.job)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
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
			if tt.unstart && got.RestartID != "" {
				t.Errorf("RestartID = %q after Unstart, want no child", got.RestartID)
			}
		})
	}
}

// A job that cannot start is skipped or failed before its turn, with the reason given.
func TestObserveSkipAndFailedBeforeStart(t *testing.T) {
	f := Fleet{ID: "f1", Jobs: []Job{{Namespace: "a", JobID: "x", Status: JobPending}, {Namespace: "a", JobID: "y", Status: JobPending}}}
	if err := Observe(&f, Observation{Namespace: "a", JobID: "x", Skip: "no allocation"}); err != nil {
		t.Fatal(err)
	}
	if err := Observe(&f, Observation{Namespace: "a", JobID: "y", Failed: "refused"}); err != nil {
		t.Fatal(err)
	}
	if f.Jobs[0].Status != JobSkipped || f.Jobs[1].Status != JobFailed || f.Jobs[1].Reason != "refused" {
		t.Errorf("jobs = %+v", f.Jobs)
	}
}
