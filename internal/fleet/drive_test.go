package fleet

import (
	"fmt"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// scenario is a whole fleet driven to its end by a fake driver that applies every decision
// and ends one child per round, oldest first.
type scenario struct {
	name     string
	options  Options
	jobs     int
	outcome  map[int]restart.Status // a child's end; succeeded when absent
	purged   map[int]bool
	busy     map[int]int // job -> rounds it stays busy with another restart
	want     restart.Status
	wantEnds map[JobStatus]int
	wantPeak int // most children running at once
}

func TestDriveAFleetToItsEnd(t *testing.T) {
	tests := []scenario{
		{name: "20 jobs, 5 at a time", options: opts(5, 0, restart.OnErrorFail), jobs: 20,
			want: restart.StatusSucceeded, wantEnds: map[JobStatus]int{S: 20}, wantPeak: 5},
		{name: "one at a time", options: opts(1, 0, restart.OnErrorFail), jobs: 4,
			want: restart.StatusSucceeded, wantEnds: map[JobStatus]int{S: 4}, wantPeak: 1},
		{name: "purged and busy-wait jobs", options: opts(2, 0, restart.OnErrorFail), jobs: 6,
			purged: map[int]bool{1: true}, busy: map[int]int{0: 3},
			want: restart.StatusSucceeded, wantEnds: map[JobStatus]int{S: 5, K: 1}, wantPeak: 2},
		{name: "busy-skip jobs", options: func() Options { o := opts(3, 0, restart.OnErrorFail); o.Busy = BusySkip; return o }(), jobs: 6,
			busy: map[int]int{2: 1, 4: 1},
			want: restart.StatusSucceeded, wantEnds: map[JobStatus]int{S: 4, K: 2}, wantPeak: 3},
		{name: "budget 0 stops at the first failure", options: opts(1, 0, restart.OnErrorFail), jobs: 5,
			outcome: map[int]restart.Status{1: restart.StatusFailed},
			want:    restart.StatusFailed, wantEnds: map[JobStatus]int{S: 1, F: 1, C: 3}, wantPeak: 1},
		{name: "budget 2 with 5 in parallel: mixed outcomes", options: opts(5, 2, restart.OnErrorFail), jobs: 12,
			outcome: map[int]restart.Status{0: restart.StatusFailed, 3: restart.StatusFailed, 4: restart.StatusCanceled},
			want:    restart.StatusFailed, wantEnds: map[JobStatus]int{S: 9, F: 2, C: 1}, wantPeak: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { drive(t, tt) })
	}
}

func drive(t *testing.T, sc scenario) {
	t.Helper()
	f := Fleet{ID: "f1", Options: sc.options, Jobs: jobsIn(make([]JobStatus, sc.jobs)...), Status: restart.StatusPending}
	for i := range f.Jobs {
		f.Jobs[i].Status = JobPending
	}
	started := map[string]int{}
	peak := 0
	for round := 0; !f.Status.Terminal(); round++ {
		if round > 10*sc.jobs+10 {
			t.Fatalf("the fleet did not end: %+v", f)
		}
		observeNomad(t, &f, sc, round)
		d := Next(f)
		d.Record(&f)
		for _, i := range d.Start {
			job := f.Jobs[i]
			started[job.JobID]++
			mustObserve(t, &f, Observation{Namespace: job.Namespace, JobID: job.JobID, RestartID: "r-" + job.JobID, ChildStatus: restart.StatusPending})
		}
		running := tallyOf(f).running
		if running > f.Options.MaxParallelJobs {
			t.Fatalf("round %d: %d children running, more than -max-parallel-jobs %d", round, running, f.Options.MaxParallelJobs)
		}
		peak = max(peak, running)
		endOldestChild(t, &f, sc)
	}
	for id, n := range started {
		if n != 1 {
			t.Errorf("job %s started %d times, want once", id, n)
		}
	}
	ends := map[JobStatus]int{}
	for _, j := range f.Jobs {
		ends[j.Status]++
	}
	if f.Status != sc.want || fmt.Sprint(ends) != fmt.Sprint(sc.wantEnds) || peak != sc.wantPeak {
		t.Errorf("fleet ended %s with jobs %v, peak %d; want %s with %v, peak %d", f.Status, ends, peak, sc.want, sc.wantEnds, sc.wantPeak)
	}
}

// observeNomad reports the purged jobs and the jobs still busy with another restart.
func observeNomad(t *testing.T, f *Fleet, sc scenario, round int) {
	for i, j := range f.Jobs {
		obs := Observation{Namespace: j.Namespace, JobID: j.JobID, Purged: sc.purged[i]}
		if round < sc.busy[i] {
			obs.BusyWith = "other"
		}
		mustObserve(t, f, obs)
	}
}

func endOldestChild(t *testing.T, f *Fleet, sc scenario) {
	for i, j := range f.Jobs {
		if j.Status == JobRunning {
			end, ok := sc.outcome[i]
			if !ok {
				end = restart.StatusSucceeded
			}
			mustObserve(t, f, Observation{Namespace: j.Namespace, JobID: j.JobID, RestartID: j.RestartID, ChildStatus: end})
			return
		}
	}
}

func mustObserve(t *testing.T, f *Fleet, obs Observation) {
	t.Helper()
	if err := Observe(f, obs); err != nil {
		t.Fatal(err)
	}
}
