package fleet

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// jobsIn builds jobs j0, j1, ... in the given statuses; those that had their turn have a
// child restart.
func jobsIn(statuses ...JobStatus) []Job {
	jobs := make([]Job, len(statuses))
	for i, s := range statuses {
		jobs[i] = Job{Namespace: "default", JobID: fmt.Sprintf("j%d", i), Status: s}
		if s == JobRunning || s == JobSucceeded || s == JobFailed {
			jobs[i].RestartID = fmt.Sprintf("r%d", i)
		}
	}
	return jobs
}

// with returns jobs with job i changed by change.
func with(jobs []Job, i int, change func(*Job)) []Job {
	change(&jobs[i])
	return jobs
}

func opts(parallel, failures int, onError restart.OnError) Options {
	return Options{MaxParallelJobs: parallel, MaxFailedJobs: failures, Order: OrderName, Busy: BusyWait, OnError: onError}
}

const (
	P = JobPending
	R = JobRunning
	S = JobSucceeded
	F = JobFailed
	K = JobSkipped
	C = JobCanceled
)

func TestNext(t *testing.T) {
	steerAll := func(intent restart.Intent, jobs ...int) []Steer {
		var out []Steer
		for _, j := range jobs {
			out = append(out, Steer{Job: j, Intent: intent})
		}
		return out
	}
	paused := func(j *Job) { j.Steered = restart.IntentPause }
	canceled := func(j *Job) { j.Steered = restart.IntentCancel }
	busy := func(j *Job) { j.BusyWith = "other" }
	tests := []struct {
		name        string
		options     Options
		status      restart.Status // the fleet's recorded status; running if empty
		intent      restart.Intent
		jobs        []Job
		wantStart   []int
		wantSteer   []Steer
		wantAbandon []int
		wantStatus  restart.Status
		wantReason  string // a part of Reason; "" means any
	}{
		// -max-parallel-jobs
		{name: "parallel 1 starts the first job", options: opts(1, 0, restart.OnErrorFail), status: restart.StatusPending,
			jobs: jobsIn(P, P, P), wantStart: []int{0}, wantStatus: restart.StatusRunning},
		{name: "parallel 1 waits for the running job", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(S, R, P), wantStatus: restart.StatusRunning},
		{name: "parallel 1 starts the next when one ended", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(S, S, P, P), wantStart: []int{2}, wantStatus: restart.StatusRunning},
		{name: "parallel 5 starts five", options: opts(5, 0, restart.OnErrorFail), status: restart.StatusPending,
			jobs: jobsIn(P, P, P, P, P, P, P), wantStart: []int{0, 1, 2, 3, 4}, wantStatus: restart.StatusRunning},
		{name: "parallel 5 counts the running ones", options: opts(5, 0, restart.OnErrorFail),
			jobs: jobsIn(R, S, R, P, R, P, P, P), wantStart: []int{3, 5}, wantStatus: restart.StatusRunning},
		{name: "parallel 5 with fewer jobs left", options: opts(5, 0, restart.OnErrorFail),
			jobs: jobsIn(S, R, P), wantStart: []int{2}, wantStatus: restart.StatusRunning},

		// -max-failed-jobs and -on-error
		{name: "budget 0: the first failure with nothing running fails the fleet", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(S, F, P, P), wantAbandon: []int{2, 3}, wantStatus: restart.StatusFailed, wantReason: "1 job failed, more than -max-failed-jobs 0"},
		{name: "budget 0: the running children finish first", options: opts(5, 0, restart.OnErrorFail),
			jobs: jobsIn(F, R, R, P), wantStatus: restart.StatusRunning, wantReason: "no new job starts"},
		{name: "budget 0 with on-error ask waits for an answer", options: opts(1, 0, restart.OnErrorAsk),
			jobs: jobsIn(F, P, P), wantStatus: restart.StatusWaiting, wantReason: "more than -max-failed-jobs 0 allows"},
		{name: "budget 0 with on-error ask keeps asking", options: opts(1, 0, restart.OnErrorAsk), status: restart.StatusWaiting,
			jobs: jobsIn(F, P, P), wantStatus: restart.StatusWaiting},
		{name: "budget 0 raised by the answer starts again", options: opts(1, 1, restart.OnErrorAsk), status: restart.StatusWaiting,
			jobs: jobsIn(F, P, P), wantStart: []int{1}, wantStatus: restart.StatusRunning},
		{name: "budget 2: two failures go on", options: opts(1, 2, restart.OnErrorFail),
			jobs: jobsIn(F, S, F, P), wantStart: []int{3}, wantStatus: restart.StatusRunning},
		{name: "budget 2: the third failure stops", options: opts(1, 2, restart.OnErrorFail),
			jobs: jobsIn(F, F, F, P), wantAbandon: []int{3}, wantStatus: restart.StatusFailed, wantReason: "3 jobs failed, more than -max-failed-jobs 2"},
		{name: "budget 2 with parallel 5 fills the free slots", options: opts(5, 2, restart.OnErrorFail),
			jobs: jobsIn(F, F, R, P, P, P), wantStart: []int{3, 4, 5}, wantStatus: restart.StatusRunning},
		{name: "budget 2 spent while children run", options: opts(5, 2, restart.OnErrorFail),
			jobs: jobsIn(F, F, F, R, P), wantStatus: restart.StatusRunning, wantReason: "no new job starts"},
		{name: "a child canceled alone is not a failure", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(C, P), wantStart: []int{1}, wantStatus: restart.StatusRunning},

		// -busy
		{name: "a busy job under wait is passed over", options: opts(1, 0, restart.OnErrorFail),
			jobs: with(jobsIn(P, P), 0, busy), wantStart: []int{1}, wantStatus: restart.StatusRunning},
		{name: "only busy jobs left: the fleet waits running", options: opts(2, 0, restart.OnErrorFail),
			jobs: with(jobsIn(S, P), 1, busy), wantStatus: restart.StatusRunning},
		{name: "a job busy no more starts", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(S, K, P), wantStart: []int{2}, wantStatus: restart.StatusRunning},

		// the end
		{name: "all skipped succeeds", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(K, K, K), wantStatus: restart.StatusSucceeded},
		{name: "succeeded and skipped succeeds", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(S, K, S), wantStatus: restart.StatusSucceeded},
		{name: "a failure within the budget still fails the fleet at the end", options: opts(1, 2, restart.OnErrorFail),
			jobs: jobsIn(S, F, K, S), wantStatus: restart.StatusFailed, wantReason: "1 job of 4 failed and 0 canceled"},
		{name: "a child canceled alone fails the fleet at the end", options: opts(1, 0, restart.OnErrorFail),
			jobs: jobsIn(S, C, S), wantStatus: restart.StatusFailed, wantReason: "1 canceled"},
		{name: "an ended fleet decides nothing", options: opts(1, 0, restart.OnErrorFail), status: restart.StatusCanceled, intent: restart.IntentRun,
			jobs: jobsIn(R, P), wantStatus: restart.StatusCanceled},

		// pause and resume
		{name: "pause with children running: paused at once, pause forwarded", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentPause,
			jobs: jobsIn(S, R, R, P), wantSteer: steerAll(restart.IntentPause, 1, 2), wantStatus: restart.StatusPaused, wantReason: "paused by ops"},
		{name: "pause is forwarded once", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentPause, status: restart.StatusPaused,
			jobs: with(jobsIn(S, R, R, P), 1, paused), wantSteer: steerAll(restart.IntentPause, 2), wantStatus: restart.StatusPaused},
		{name: "pause starts nothing", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentPause, status: restart.StatusPaused,
			jobs: jobsIn(S, P, P), wantStatus: restart.StatusPaused},
		{name: "pause after the last job ended still ends", options: opts(1, 0, restart.OnErrorFail), intent: restart.IntentPause, status: restart.StatusPaused,
			jobs: jobsIn(S, S), wantStatus: restart.StatusSucceeded},
		{name: "pause with the budget spent still fails", options: opts(1, 0, restart.OnErrorFail), intent: restart.IntentPause, status: restart.StatusPaused,
			jobs: with(jobsIn(F, R, P), 1, func(j *Job) { j.Status = JobSucceeded }), wantAbandon: []int{2}, wantStatus: restart.StatusFailed},
		{name: "resume forwards run to the children the fleet paused", options: opts(2, 0, restart.OnErrorFail), intent: restart.IntentRun, status: restart.StatusPaused,
			jobs: with(jobsIn(R, P, P), 0, paused), wantStart: []int{1}, wantSteer: steerAll(restart.IntentRun, 0), wantStatus: restart.StatusRunning},
		{name: "resume leaves a child an operator paused alone", options: opts(2, 0, restart.OnErrorFail), intent: restart.IntentRun,
			jobs: jobsIn(R, P), wantStart: []int{1}, wantStatus: restart.StatusRunning},

		// cancel
		{name: "cancel with children running: cancel forwarded, the rest abandoned", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentCancel,
			jobs: jobsIn(S, R, R, P, P), wantSteer: steerAll(restart.IntentCancel, 1, 2), wantAbandon: []int{3, 4}, wantStatus: restart.StatusRunning, wantReason: "canceled by ops"},
		{name: "cancel reaches a child the fleet paused", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentCancel, status: restart.StatusPaused,
			jobs: with(jobsIn(R, P), 0, paused), wantSteer: steerAll(restart.IntentCancel, 0), wantAbandon: []int{1}, wantStatus: restart.StatusPaused},
		{name: "cancel is forwarded once", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentCancel,
			jobs: with(jobsIn(R, C), 0, canceled), wantStatus: restart.StatusRunning},
		{name: "a child the fleet canceled is given no other intent", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentPause,
			jobs: with(jobsIn(R, R), 0, canceled), wantSteer: steerAll(restart.IntentPause, 1), wantStatus: restart.StatusPaused},
		{name: "cancel ends the fleet once no child runs", options: opts(5, 0, restart.OnErrorFail), intent: restart.IntentCancel,
			jobs: jobsIn(S, C, C), wantStatus: restart.StatusCanceled},
		{name: "cancel of a waiting fleet", options: opts(1, 0, restart.OnErrorAsk), intent: restart.IntentCancel, status: restart.StatusWaiting,
			jobs: jobsIn(F, P), wantAbandon: []int{1}, wantStatus: restart.StatusCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := tt.status
			if status == "" {
				status = restart.StatusRunning
			}
			f := Fleet{ID: "f1", Options: tt.options, Jobs: tt.jobs, Status: status, Control: restart.Control{Intent: tt.intent, By: "ops"}}
			before := slices.Clone(f.Jobs)
			d := Next(f)
			if !slices.Equal(d.Start, tt.wantStart) {
				t.Errorf("Start = %v, want %v", d.Start, tt.wantStart)
			}
			if !slices.Equal(d.Steer, tt.wantSteer) {
				t.Errorf("Steer = %v, want %v", d.Steer, tt.wantSteer)
			}
			if !slices.Equal(d.Abandon, tt.wantAbandon) {
				t.Errorf("Abandon = %v, want %v", d.Abandon, tt.wantAbandon)
			}
			if d.Status != tt.wantStatus {
				t.Errorf("Status = %s, want %s (reason %q)", d.Status, tt.wantStatus, d.Reason)
			}
			if !strings.Contains(d.Reason, tt.wantReason) {
				t.Errorf("Reason = %q, want one containing %q", d.Reason, tt.wantReason)
			}
			if !reflect.DeepEqual(f.Jobs, before) {
				t.Errorf("Next changed the fleet's jobs")
			}
		})
	}
}

func TestDecisionRecord(t *testing.T) {
	f := Fleet{ID: "f1", Options: opts(1, 0, restart.OnErrorFail), Jobs: jobsIn(S, F, P, P), Status: restart.StatusRunning}
	d := Next(f)
	d.Record(&f)
	if f.Status != restart.StatusFailed {
		t.Errorf("Status = %s, want failed", f.Status)
	}
	for _, i := range []int{2, 3} {
		if j := f.Jobs[i]; j.Status != JobCanceled || !strings.Contains(j.Reason, "-max-failed-jobs 0") {
			t.Errorf("abandoned job %s = %s %q, want canceled with the budget's reason", j.JobID, j.Status, j.Reason)
		}
	}
	if f.Jobs[0].Status != JobSucceeded || f.Jobs[1].Status != JobFailed {
		t.Errorf("Record changed jobs it did not abandon: %+v", f.Jobs[:2])
	}
}

func TestUpcoming(t *testing.T) {
	busy := func(j *Job) { j.BusyWith = "other" }
	tests := []struct {
		name string
		f    Fleet
		n    int
		want []int
	}{
		{name: "the next pending jobs in order, past the free slots", n: 2,
			f:    Fleet{Options: opts(1, 0, restart.OnErrorFail), Jobs: jobsIn(S, R, P, P, P), Status: restart.StatusRunning},
			want: []int{2, 3}},
		{name: "a job waiting for another restart is passed over, as Next does", n: 2,
			f:    Fleet{Options: opts(1, 0, restart.OnErrorFail), Jobs: with(jobsIn(R, P, P, P), 1, busy), Status: restart.StatusRunning},
			want: []int{2, 3}},
		{name: "fewer pending than asked", n: 3,
			f:    Fleet{Options: opts(2, 0, restart.OnErrorFail), Jobs: jobsIn(R, S, P), Status: restart.StatusRunning},
			want: []int{2}},
		{name: "a pending fleet starts its first jobs", n: 1,
			f:    Fleet{Options: opts(1, 0, restart.OnErrorFail), Jobs: jobsIn(P, P), Status: restart.StatusPending},
			want: []int{0}},
		{name: "none asked", n: 0,
			f: Fleet{Options: opts(1, 0, restart.OnErrorFail), Jobs: jobsIn(R, P), Status: restart.StatusRunning}},
		{name: "paused: nothing starts", n: 2,
			f: Fleet{Options: opts(1, 0, restart.OnErrorFail), Jobs: jobsIn(R, P), Status: restart.StatusPaused, Control: restart.Control{Intent: restart.IntentPause}}},
		{name: "canceled: nothing starts", n: 2,
			f: Fleet{Options: opts(1, 0, restart.OnErrorFail), Jobs: jobsIn(R, P), Status: restart.StatusRunning, Control: restart.Control{Intent: restart.IntentCancel}}},
		{name: "budget spent: nothing starts", n: 2,
			f: Fleet{Options: opts(2, 0, restart.OnErrorAsk), Jobs: jobsIn(F, R, P), Status: restart.StatusRunning}},
		{name: "ended: nothing starts", n: 2,
			f: Fleet{Options: opts(2, 0, restart.OnErrorFail), Jobs: jobsIn(S, C), Status: restart.StatusCanceled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Upcoming(tt.f, tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("Upcoming(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}
