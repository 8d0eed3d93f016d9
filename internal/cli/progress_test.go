package cli

import (
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestTracker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := &restart.Record{Batches: 3, Allocs: []restart.AllocProgress{{ID: "a", Batch: 1}, {ID: "b", Batch: 2}, {ID: "c", Batch: 3}}}
	tr := newTracker(rec)
	tr.apply(restart.Event{Type: restart.EventBatchStarted, Batch: 1, Time: t0})
	tr.apply(restart.Event{Type: restart.EventAllocDone, AllocID: "a", Time: t0.Add(10 * time.Second)})
	tr.apply(restart.Event{Type: restart.EventBatchFinished, Batch: 1, Time: t0.Add(10 * time.Second)})
	tr.apply(restart.Event{Type: restart.EventBatchStarted, Batch: 2, Time: t0.Add(10 * time.Second)})
	tr.apply(restart.Event{Type: restart.EventAllocFailed, AllocID: "b", Time: t0.Add(15 * time.Second)})
	got := tr.line(t0.Add(15 * time.Second))
	want := "batch 2/3  allocations 1/3 done, 1 failed  elapsed 15s  ~15s left"
	if got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestExitForRun(t *testing.T) {
	failed := []restart.AllocProgress{{ID: "a", State: restart.AllocFailed, Error: "boom"}}
	cases := []struct {
		name string
		rec  *restart.Record
		want int
	}{
		{"succeeded", &restart.Record{Status: restart.StatusSucceeded}, 0},
		{"no at a question before any error", &restart.Record{Status: restart.StatusCanceled, Control: restart.Control{Intent: restart.IntentRun}}, 0},
		{"no after errors", &restart.Record{Status: restart.StatusCanceled, Allocs: failed}, 1},
		{"canceled by nomad-restart cancel", &restart.Record{Status: restart.StatusCanceled, Control: restart.Control{Intent: restart.IntentCancel}}, 1},
		{"failed", &restart.Record{Status: restart.StatusFailed}, 1},
		{"errors ignored at a question", &restart.Record{Status: restart.StatusSucceeded, Allocs: failed}, 1},
		{"nil", nil, 1},
	}
	for _, tc := range cases {
		if got := exitForRun(tc.rec); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestTrackerSaysWhatItWaitsFor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	id1, id2 := "aaaaaaaa-1111-4000-8000-000000000001", "bbbbbbbb-2222-4000-8000-000000000002"
	rec := &restart.Record{Batches: 1, Allocs: []restart.AllocProgress{{ID: id1, Batch: 1}, {ID: id2, Batch: 1}}}
	tr := newTracker(rec)
	tr.apply(restart.Event{Type: restart.EventBatchStarted, Batch: 1, Time: t0})
	tr.apply(restart.Event{Type: restart.EventAllocHealth, AllocID: id1, Time: t0,
		Message: `Allocation "` + id1 + `" waits for: check ready (consul) critical: connection refused`})
	tr.apply(restart.Event{Type: restart.EventAllocHealth, AllocID: id2, Time: t0, Message: `Allocation "` + id2 + `" waits for: task app not yet running`})
	got := tr.line(t0.Add(2 * time.Second))
	want := "batch 1/1  allocations 0/2 done  elapsed 2s  waiting: aaaaaaaa check ready (consul) critical: connection refused (+1 more)"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	tr.apply(restart.Event{Type: restart.EventAllocDone, AllocID: id1, Time: t0.Add(3 * time.Second)})
	tr.apply(restart.Event{Type: restart.EventAllocHealth, AllocID: id2, Time: t0, Message: `Allocation "` + id2 + `" waits for: min healthy time: 4s of 10s`})
	got = tr.line(t0.Add(4 * time.Second))
	want = "batch 1/1  allocations 1/2 done  elapsed 4s  waiting: bbbbbbbb min healthy time: 4s of 10s"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// The tracker counts ended allocations as their states change, from the record it started
// from: an event seen twice (a resumed view replays some) counts once.
func TestTrackerCountsStateChanges(t *testing.T) {
	rec := &restart.Record{Batches: 2, Allocs: []restart.AllocProgress{
		{ID: "a", Batch: 1, State: restart.AllocDone}, {ID: "b", Batch: 1, State: restart.AllocSkipped},
		{ID: "c", Batch: 2, State: restart.AllocWaiting}, {ID: "d", Batch: 2}}}
	tr := newTracker(rec)
	for _, ev := range []restart.Event{
		{Type: restart.EventAllocDone, AllocID: "c"},
		{Type: restart.EventAllocDone, AllocID: "c"},
		{Type: restart.EventAllocFailed, AllocID: "d"},
		{Type: restart.EventAllocDone, AllocID: "d"}, // a failure answered by a retry that worked
	} {
		tr.apply(ev)
	}
	if done, failed, skipped := tr.counts(); done != 3 || failed != 0 || skipped != 1 {
		t.Fatalf("counts = %d done, %d failed, %d skipped; want 3, 0, 1", done, failed, skipped)
	}
}

func TestFleetProgressLine(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	jobs := func(statuses ...fleet.JobStatus) []fleet.Job {
		out := make([]fleet.Job, len(statuses))
		for i, s := range statuses {
			out[i] = fleet.Job{JobID: fmt.Sprintf("j%d", i), Status: s}
		}
		return out
	}
	P, R, S, F, K := fleet.JobPending, fleet.JobRunning, fleet.JobSucceeded, fleet.JobFailed, fleet.JobSkipped
	tests := []struct {
		name  string
		jobs  []fleet.Job
		start time.Time
		now   time.Duration // since start
		want  string
	}{
		{name: "not started", jobs: jobs(P, P), want: "jobs 0/2 done, 2 pending"},
		{name: "first jobs running, nothing ended: no estimate", jobs: jobs(R, R, P, P), start: start, now: 10 * time.Second,
			want: "jobs 0/4 done, 2 running, 2 pending  elapsed 10s"},
		{name: "the pace of the ended jobs gives what is left", jobs: jobs(S, F, K, R, P, P), start: start, now: time.Minute,
			want: "jobs 1/6 done, 1 running, 1 failed, 1 skipped, 2 pending  elapsed 1m0s  ~1m0s left"},
		{name: "all ended", jobs: jobs(S, S), start: start, now: time.Minute, want: "jobs 2/2 done  elapsed 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &fleet.Record{Fleet: fleet.Fleet{Jobs: tt.jobs}, StartTime: tt.start}
			if got := newFleetProgress(rec).line(start.Add(tt.now)); got != tt.want {
				t.Errorf("line = %q, want %q", got, tt.want)
			}
		})
	}

	// A drive here takes the counts from the fleet's events.
	fp := newFleetProgress(&fleet.Record{Fleet: fleet.Fleet{Jobs: jobs(P, P)}})
	if fp.take(fleetrun.Event{JobID: "j0", Counts: map[fleet.JobStatus]int{S: 2}}) {
		t.Error("a child's event changed the fleet's counts")
	}
	started := fleetrun.Event{Counts: map[fleet.JobStatus]int{R: 1, P: 1}, Event: restart.Event{Type: restart.EventStarted, Time: start}}
	if !fp.take(started) {
		t.Fatal("the fleet's event with counts was not taken")
	}
	if got, want := fp.line(start.Add(5*time.Second)), "jobs 0/2 done, 1 running, 1 pending  elapsed 5s"; got != want {
		t.Errorf("after the start event: line = %q, want %q", got, want)
	}
}
