package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The events an in-place restart adds to a task, in Nomad's order (reference exchange 22).
var restartEvents = []string{"Restart Signaled", "Terminated", "Restarting", "Started"}

func TestInPlaceRestart(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("restart")
		stub := tg.runSleepJob(t, id, 1)[0]
		alloc, _, err := tg.api.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatalf("read allocation: %v", err)
		}
		before := alloc.TaskStates["main"]
		if before == nil || before.Restarts != 0 || before.State != "running" {
			t.Fatalf("task main before the restart: %+v, want running with no restarts", before)
		}
		startedBefore := before.StartedAt

		if err := tg.api.Allocations().Restart(alloc, "", nil); err != nil {
			t.Fatalf("restart allocation %s: %v", alloc.ID, err)
		}
		returned := tg.now()

		after := tg.waitAlloc(t, alloc.ID, "task main running again after its restart", func(a *api.Allocation) bool {
			ts := a.TaskStates["main"]
			return ts != nil && ts.State == "running" && ts.Restarts == 1 && hasSuffixTypes(ts.Events, restartEvents)
		})
		ts := after.TaskStates["main"]
		events := ts.Events[len(ts.Events)-len(restartEvents):]
		for i := 1; i < len(events); i++ {
			if events[i].Time < events[i-1].Time {
				t.Errorf("event %q at %d is before %q at %d", events[i].Type, events[i].Time, events[i-1].Type, events[i-1].Time)
			}
		}
		signaled, terminated := events[0], events[1]
		if signaled.RestartReason != "User requested running tasks to restart" || signaled.DisplayMessage != "User requested running tasks to restart" {
			t.Errorf("Restart Signaled: RestartReason %q DisplayMessage %q", signaled.RestartReason, signaled.DisplayMessage)
		}
		if events[2].DisplayMessage != "Task restarting in 0s" {
			t.Errorf("Restarting: DisplayMessage %q, want %q", events[2].DisplayMessage, "Task restarting in 0s")
		}
		// Nomad answers the restart only once the old process has exited: the Terminated
		// event's time (the target's clock) is not after the moment the call returned.
		if term := time.Unix(0, terminated.Time); term.After(returned) {
			t.Errorf("restart returned at %v, before the old process terminated at %v", returned, term)
		}
		if ts.LastRestart.IsZero() || !ts.StartedAt.After(startedBefore) || ts.LastRestart.After(ts.StartedAt) {
			t.Errorf("LastRestart %v StartedAt %v (before %v): want LastRestart set and the task started again after it", ts.LastRestart, ts.StartedAt, startedBefore)
		}
		if after.ClientStatus != "running" || after.ID != alloc.ID {
			t.Errorf("after an in-place restart: allocation %s client status %q", after.ID, after.ClientStatus)
		}
	})
}

// hasSuffixTypes tells whether the events end with the given types, in order.
func hasSuffixTypes(events []*api.TaskEvent, types []string) bool {
	if len(events) < len(types) {
		return false
	}
	tail := events[len(events)-len(types):]
	for i, e := range tail {
		if e.Type != types[i] {
			return false
		}
	}
	return true
}

// runDeadPrestart registers job id with a prestart task "init" that exits at once and a
// sleeping task "main", and waits until its allocation runs with init dead.
func (tg *target) runDeadPrestart(t *testing.T, id string) *api.AllocationListStub {
	t.Helper()
	init := exitTask("init")
	init.Lifecycle = &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart}
	tg.register(t, serviceJob(id, 1, init, sleepTask("main")))
	stub := tg.waitRunning(t, id, 1)[0]
	tg.waitAlloc(t, stub.ID, "prestart task init dead", func(a *api.Allocation) bool {
		ts := a.TaskStates["init"]
		return ts != nil && ts.State == "dead"
	})
	return stub
}

func TestRestartErrors(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		// "init" is a prestart task that exits at once: dead, so not running.
		stub := tg.runDeadPrestart(t, tg.id("restart-errors"))

		cases := []struct {
			name, body, text string
		}{
			{"unknown task", `{"TaskName":"nosuch"}`, "Could not find task runner for task: nosuch"},
			{"task not running", `{"TaskName":"init"}`, "Task not running"},
		}
		for _, c := range cases {
			r := tg.do(t, "PUT", "/v1/client/allocation/"+stub.ID+"/restart", tg.token, strings.NewReader(c.body))
			if r.status != 500 || string(r.body) != c.text {
				t.Errorf("%s: restart %s = %d %q, want 500 %q", c.name, c.body, r.status, r.body, c.text)
			}
		}

		// Neither error restarted anything.
		alloc, _, err := tg.api.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatalf("read allocation: %v", err)
		}
		if n := alloc.TaskStates["main"].Restarts; n != 0 {
			t.Errorf("task main restarted %d times by failed restart calls", n)
		}
		// The official client's error carries the same text.
		err = tg.api.Allocations().Restart(alloc, "nosuch", nil)
		if err == nil || !strings.Contains(err.Error(), "Could not find task runner for task: nosuch") {
			t.Errorf("api client restart of an unknown task: %v", err)
		}
	})
}

// A restart with AllTasks runs dead tasks again in lifecycle order (Nomad's RestartAll
// force-restarts every task runner): a finished prestart task gets Restart Signaled,
// Restarting, Started, Terminated and its Restarts counter goes up, like the main task's.
func TestRestartAllTasksRerunsDeadTasks(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		stub := tg.runDeadPrestart(t, tg.id("restart-all"))
		// The main task starts after the prestart task; restart only once it runs, or the
		// restart can land while it is still starting.
		tg.waitAlloc(t, stub.ID, "main task running", func(a *api.Allocation) bool {
			ts := a.TaskStates["main"]
			return ts != nil && ts.State == "running" && hasSuffixTypes(ts.Events, []string{"Started"})
		})
		r := tg.do(t, "PUT", "/v1/client/allocation/"+stub.ID+"/restart", tg.token, strings.NewReader(`{"AllTasks":true}`))
		if r.status != 200 {
			t.Fatalf("restart AllTasks: %d %q", r.status, r.body)
		}
		initEvents := []string{"Restart Signaled", "Restarting", "Started", "Terminated"}
		// Only the prestart task is checked: on a real agent the main task's restart under
		// AllTasks was once not seen within 90 s (1 run in 3), so it is not a stable fact.
		alloc := tg.waitAlloc(t, stub.ID, "init ran again", func(a *api.Allocation) bool {
			ts := a.TaskStates["init"]
			return ts != nil && ts.State == "dead" && hasSuffixTypes(ts.Events, []string{"Started", "Terminated"}) && len(ts.Events) > 4
		})
		ts := alloc.TaskStates["init"]
		if ts.Restarts != 1 || !hasSuffixTypes(ts.Events, initEvents) {
			t.Errorf("prestart task after AllTasks restart: Restarts %d events %s; want 1 and ending %v", ts.Restarts, eventTypes(ts.Events), initEvents)
		}
	})
}
