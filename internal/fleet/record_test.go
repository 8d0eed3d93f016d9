package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestChildIDDerivesFromFleetAndJob(t *testing.T) {
	a := ChildID("f1", "default", "web")
	if a != ChildID("f1", "default", "web") {
		t.Fatal("ChildID is not stable")
	}
	for _, other := range []string{ChildID("f2", "default", "web"), ChildID("f1", "prod", "web"), ChildID("f1", "default", "web2"), ChildID("f1", "defaultw", "eb")} {
		if other == a {
			t.Errorf("two jobs or fleets share child ID %s", a)
		}
	}
}

func TestApplyAnswer(t *testing.T) {
	waiting := func() *Record {
		r := &Record{Fleet: Fleet{ID: "f1", Options: Options{MaxParallelJobs: 1}, Status: restart.StatusWaiting,
			Jobs: []Job{{JobID: "a", Status: JobFailed}, {JobID: "b", Status: JobFailed}, {JobID: "c", Status: JobPending}}}}
		r.Question = BudgetQuestion("q1", "2 jobs failed", time.Now())
		return r
	}
	r := waiting()
	if ok, err := ApplyAnswer(r, "y"); err != nil || !ok {
		t.Fatalf("yes: %v %v", ok, err)
	}
	if r.Options.MaxFailedJobs != 2 || r.Status != restart.StatusRunning || r.Question != nil {
		t.Errorf("after yes: budget %d, status %s", r.Options.MaxFailedJobs, r.Status)
	}
	if d := Next(r.Fleet); len(d.Start) != 1 || d.Start[0] != 2 {
		t.Errorf("after yes the pending job should start: %+v", d)
	}
	r = waiting()
	if _, err := ApplyAnswer(r, ""); err == nil || r.Status != restart.StatusWaiting {
		t.Fatalf("an empty answer: %v, status %s; want it refused and the fleet still waiting", err, r.Status)
	}
	if ok, err := ApplyAnswer(r, "n"); err != nil || ok {
		t.Fatalf("no: %v %v", ok, err)
	}
	if r.Status != restart.StatusFailed || r.Jobs[2].Status != JobCanceled {
		t.Errorf("after no: %s, %+v", r.Status, r.Jobs[2])
	}
	r = waiting()
	if _, err := ApplyAnswer(r, "maybe"); err == nil || !strings.Contains(err.Error(), "y/N") {
		t.Errorf("an invalid answer: %v", err)
	}
	r.Status = restart.StatusRunning
	if _, err := ApplyAnswer(r, "y"); err == nil {
		t.Error("a fleet that asks nothing took an answer")
	}
}

func TestAddEventBoundsTheLog(t *testing.T) {
	var r Record
	for range MaxEvents + 7 {
		r.AddEvent(time.Now(), restart.EventStarted, "x")
	}
	if len(r.Events) != MaxEvents || r.Events[0].Seq != 8 || r.Events[len(r.Events)-1].Seq != MaxEvents+7 {
		t.Errorf("log of %d events from seq %d", len(r.Events), r.Events[0].Seq)
	}
}

func TestStatusEvent(t *testing.T) {
	tests := []struct {
		from, to restart.Status
		want     restart.EventType
	}{
		{restart.StatusPending, restart.StatusRunning, restart.EventStarted},
		{restart.StatusPaused, restart.StatusRunning, restart.EventResumed},
		{restart.StatusRunning, restart.StatusPaused, restart.EventPaused},
		{restart.StatusRunning, restart.StatusWaiting, restart.EventQuestion},
		{restart.StatusRunning, restart.StatusFailed, restart.EventFailed},
		{restart.StatusRunning, restart.StatusCanceled, restart.EventCanceled},
		{restart.StatusRunning, restart.StatusSucceeded, restart.EventSucceeded},
	}
	for _, tt := range tests {
		if got := StatusEvent(tt.from, tt.to); got != tt.want {
			t.Errorf("StatusEvent(%s, %s) = %s, want %s", tt.from, tt.to, got, tt.want)
		}
	}
}
