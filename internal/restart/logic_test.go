package restart

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAppendEventBounded(t *testing.T) {
	r := &Record{}
	for i := 1; i <= MaxEvents+50; i++ {
		e := r.AppendEvent(Event{Message: fmt.Sprint(i)})
		if e.Seq != uint64(i) {
			t.Fatalf("event %d got seq %d", i, e.Seq)
		}
	}
	if len(r.Events) != MaxEvents {
		t.Fatalf("len %d, want %d", len(r.Events), MaxEvents)
	}
	if r.Events[0].Seq != 0 || r.Events[0].Type != EventWarning || !strings.Contains(r.Events[0].Message, "51 earlier events") {
		t.Fatalf("marker = %+v", r.Events[0])
	}
	markers := 0
	for _, e := range r.Events {
		if e.Seq == 0 {
			markers++
		}
	}
	if markers != 1 {
		t.Fatalf("%d markers", markers)
	}
	if r.LastSeq() != MaxEvents+50 || r.Events[1].Seq != 52 {
		t.Fatalf("last %d first %d", r.LastSeq(), r.Events[1].Seq)
	}
	if got := r.EventsAfter(MaxEvents + 48); len(got) != 2 {
		t.Fatalf("EventsAfter = %d events", len(got))
	}
}

func TestTransitions(t *testing.T) {
	cases := []struct {
		from, to Status
		ok       bool
	}{
		{StatusPending, StatusRunning, true},
		{StatusPending, StatusCanceled, true},
		{StatusPending, StatusSucceeded, false},
		{StatusRunning, StatusWaiting, true},
		{StatusWaiting, StatusRunning, true},
		{StatusPaused, StatusRunning, true},
		{StatusPaused, StatusWaiting, false},
		{StatusSucceeded, StatusRunning, false},
		{StatusCanceled, StatusCanceled, false},
		{StatusRunning, StatusRunning, true},
	}
	for _, tc := range cases {
		if got := CanTransition(tc.from, tc.to); got != tc.ok {
			t.Errorf("%s -> %s = %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
	r := &Record{Status: StatusWaiting, Question: &Question{}}
	if err := r.SetStatus(StatusRunning, ""); err != nil || r.Question != nil {
		t.Fatalf("SetStatus: %v, question %v", err, r.Question)
	}
	if err := (&Record{Status: StatusFailed}).SetStatus(StatusRunning, ""); err == nil {
		t.Fatal("terminal record moved")
	}
}

func TestQuestions(t *testing.T) {
	cases := []struct {
		name                     string
		errs, unrec, last, askOn bool
		prompt, def              string
	}{
		{"proceed", false, false, false, false, "Proceed with the next batch? [Y/n]", "y"},
		{"proceed ask", false, false, false, true, "Proceed with the next batch? [Y/n/<wait duration>]", "y"},
		{"errors", true, false, false, false, "Ignore the errors above and proceed with the next batch? [y/N]", "n"},
		{"errors ask", true, false, false, true, "Ignore the errors above and proceed with the next batch? [y/N/<wait duration>]", "n"},
		{"unrecoverable", true, true, false, false, "The errors above are likely to happen again.\nIgnore them anyway and proceed with the next batch? [y/N]", "n"},
		{"last batch", true, false, true, true, "The last batch had the errors above.\nIgnore them and mark the restart as succeeded? [y/N]", "n"},
	}
	for _, tc := range cases {
		q := NewQuestion("q1", 1, tc.errs, tc.unrec, tc.last, tc.askOn, time.Time{})
		if q.Prompt() != tc.prompt || q.Default != tc.def {
			t.Errorf("%s: %q default %q", tc.name, q.Prompt(), q.Default)
		}
		if _, err := ParseAnswer(q, " "); !errors.Is(err, ErrInvalidAnswer) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("%s: empty answer: err = %v, want it refused", tc.name, err)
		}
		a, err := ParseAnswer(q, AtPrompt(q, ""))
		if err != nil || a.Proceed != (tc.def == "y") {
			t.Errorf("%s: Enter at the prompt = %+v, %v", tc.name, a, err)
		}
		_, err = ParseAnswer(q, "10s")
		if (err == nil) != (tc.askOn && !tc.last) {
			t.Errorf("%s: duration answer err = %v", tc.name, err)
		}
	}
}

func TestUnrecoverable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("Unexpected response code: 500 (Task not running)"), false},
		{errors.New("Unexpected response code: 403 (Permission denied)"), true},
		{fmt.Errorf("evaluation x: %w", ErrPlacementFailure), true},
	}
	for _, tc := range cases {
		if got := Unrecoverable(tc.err); got != tc.want {
			t.Errorf("Unrecoverable(%v) = %v", tc.err, got)
		}
	}
}

func TestProgress(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Record{Status: StatusRunning, StartTime: t0, Batches: 3, CurrentBatch: 2, BatchWait: 10 * time.Second,
		Allocs: []AllocProgress{
			{Batch: 1, State: AllocDone, StartTime: t0, EndTime: t0.Add(20 * time.Second)},
			{Batch: 1, State: AllocFailed, StartTime: t0, EndTime: t0.Add(10 * time.Second)},
			{Batch: 2, State: AllocWaiting, StartTime: t0.Add(30 * time.Second)},
			{Batch: 3, State: AllocPending},
		}}
	p := r.Progress(t0.Add(40 * time.Second))
	if p.Done != 1 || p.Failed != 1 || p.InFlight != 1 || p.Total != 4 || p.Elapsed != 40*time.Second {
		t.Fatalf("%+v", p)
	}
	// Mean finished batch 20s, 2 batches left, one wait between them.
	if p.Estimate != 50*time.Second {
		t.Fatalf("estimate %v", p.Estimate)
	}
	if s := p.String(); s != "batch 2 of 3, 1/4 allocations done, 1 failed, 40s elapsed, ~50s left" {
		t.Fatalf("%q", s)
	}
}
