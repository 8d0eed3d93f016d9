package restart

import (
	"reflect"
	"testing"
	"time"
)

func TestConvergence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // Nomad's clock
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	running := TaskState{State: TaskRunning, Restarts: 2, Events: []TaskEvent{{Type: TaskEventStarted, Time: at(0)}}}
	before := &Alloc{ID: "a", ClientStatus: ClientRunning, ModifyIndex: 7, Tasks: map[string]TaskState{
		"main": running,
		"pre":  {State: TaskDead, Events: []TaskEvent{{Type: TaskEventTerminated, Time: at(-5)}}},
	}}
	if got := TargetTasks(before, nil, false); !reflect.DeepEqual(got, []string{"main"}) {
		t.Fatalf("running targets %v", got)
	}
	if got := TargetTasks(before, nil, true); !reflect.DeepEqual(got, []string{"main", "pre"}) {
		t.Fatalf("all targets %v", got)
	}
	if got := TargetTasks(before, []string{"pre", "zzz"}, false); !reflect.DeepEqual(got, []string{"pre"}) {
		t.Fatalf("named targets %v", got)
	}
	obs := Observe(before, []string{"main"})
	if obs.LastEventTime != at(0) || obs.Restarts["main"] != 2 || obs.AllocModifyIndex != 7 {
		t.Fatalf("observation %+v", obs)
	}

	ev := func(typ string, s int) TaskEvent { return TaskEvent{Type: typ, Time: at(s)} }
	cases := []struct {
		name           string
		task           TaskState
		client         string
		effect, again  bool
		finishedOKOnly bool // again only when finishedOK
	}{
		{"untouched", running, ClientRunning, false, false, false},
		{"signaled, still running old process", TaskState{State: TaskRunning, Restarts: 2, Events: append(running.Events, ev(TaskEventRestartSignaled, 1))}, ClientRunning, true, false, false},
		{"restarting, pending", TaskState{State: TaskPending, Restarts: 3, Events: append(running.Events, ev(TaskEventRestartSignaled, 1), ev(TaskEventRestarting, 2))}, ClientRunning, true, false, false},
		{"started again", TaskState{State: TaskRunning, Restarts: 3, Events: append(running.Events, ev(TaskEventRestartSignaled, 1), ev(TaskEventRestarting, 2), ev(TaskEventStarted, 3))}, ClientRunning, true, true, false},
		{"events lost, counter up", TaskState{State: TaskRunning, Restarts: 3}, ClientRunning, true, true, false},
		{"started before signal only", TaskState{State: TaskRunning, Restarts: 2, Events: append(running.Events, ev(TaskEventStarted, 1), ev(TaskEventKilling, 2))}, ClientRunning, true, false, false},
		{"alloc not running", TaskState{State: TaskRunning, Restarts: 3}, ClientPending, true, false, false},
		{"batch task re-ran and finished", TaskState{State: TaskDead, Restarts: 3, Events: append(running.Events, ev(TaskEventRestarting, 2), ev(TaskEventStarted, 3), ev(TaskEventTerminated, 4))}, ClientComplete, true, true, true},
		{"re-ran and failed", TaskState{State: TaskDead, Failed: true, Restarts: 3, Events: append(running.Events, ev(TaskEventRestarting, 2), ev(TaskEventStarted, 3))}, ClientRunning, true, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := &Alloc{ID: "a", ClientStatus: tc.client, Tasks: map[string]TaskState{"main": tc.task}}
			if got := InPlaceTookEffect(obs, now); got != tc.effect {
				t.Errorf("took effect = %v, want %v", got, tc.effect)
			}
			wantNotOK := tc.again && !tc.finishedOKOnly
			if got := RunningAgain(obs, now, false); got != wantNotOK {
				t.Errorf("running again = %v, want %v", got, wantNotOK)
			}
			if got := RunningAgain(obs, now, true); got != tc.again {
				t.Errorf("running again (batch) = %v, want %v", got, tc.again)
			}
		})
	}

	// A finished prestart task targeted by -all-tasks counts when it ran again successfully.
	all := Observe(before, []string{"main", "pre"})
	pre := TaskState{State: TaskDead, Events: []TaskEvent{ev(TaskEventTerminated, -5), ev(TaskEventRestarting, 1), ev(TaskEventStarted, 2), ev(TaskEventTerminated, 3)}}
	main := TaskState{State: TaskRunning, Restarts: 3, Events: []TaskEvent{ev(TaskEventStarted, 4)}}
	now := &Alloc{ID: "a", ClientStatus: ClientRunning, Tasks: map[string]TaskState{"main": main, "pre": pre}}
	if !RunningAgain(all, now, false) {
		t.Fatal("prestart re-run not accepted")
	}
	if got := PendingTasks(all, &Alloc{Tasks: map[string]TaskState{"main": main, "pre": before.Tasks["pre"]}}); !reflect.DeepEqual(got, []string{"pre"}) {
		t.Fatalf("pending %v", got)
	}
}

func TestStopAndReplacement(t *testing.T) {
	cases := []struct {
		a    Alloc
		stop bool
	}{
		{Alloc{DesiredStatus: DesiredRun}, false},
		{Alloc{DesiredStatus: DesiredStop}, true},
		{Alloc{DesiredStatus: "evict"}, true},
		{Alloc{DesiredStatus: DesiredRun, NextAllocation: "b"}, true},
	}
	for _, tc := range cases {
		if got := StopTookEffect(&tc.a); got != tc.stop {
			t.Errorf("%+v: %v", tc.a, got)
		}
	}
	run := map[string]TaskState{"main": {State: TaskRunning}, "pre": {State: TaskDead}}
	pending := map[string]TaskState{"main": {State: TaskPending}}
	rc := []struct {
		name   string
		a      *Alloc
		health HealthMode
		batch  bool
		want   bool
	}{
		{"original", &Alloc{ID: "a", ClientStatus: ClientRunning, Tasks: run}, HealthNone, false, false},
		{"replacement running", &Alloc{ID: "b", ClientStatus: ClientRunning, Tasks: pending}, HealthNone, false, true},
		{"replacement tasks pending", &Alloc{ID: "b", ClientStatus: ClientRunning, Tasks: pending}, HealthRunning, false, false},
		{"replacement tasks running", &Alloc{ID: "b", ClientStatus: ClientRunning, Tasks: run}, HealthRunning, false, true},
		{"replaced again", &Alloc{ID: "b", ClientStatus: ClientRunning, NextAllocation: "c", Tasks: run}, HealthRunning, false, false},
		{"batch completed", &Alloc{ID: "b", ClientStatus: ClientComplete}, HealthRunning, true, true},
		{"service completed", &Alloc{ID: "b", ClientStatus: ClientComplete}, HealthRunning, false, false},
	}
	for _, tc := range rc {
		if got := ReplacementReady(tc.a, "a", tc.health, tc.batch); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
