package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Task events as Nomad's client emits them (nomad/structs TaskEvent and its Populate
// display messages).

func (c *Cluster) taskEvent(typ string) *api.TaskEvent {
	return &api.TaskEvent{Type: typ, Time: c.NowNano(), Details: map[string]string{}}
}

// shownEvent is an event of type typ that Nomad displays as display.
func (c *Cluster) shownEvent(typ, display string) *api.TaskEvent {
	e := c.taskEvent(typ)
	e.DisplayMessage = display
	return e
}

// detailEvent is an event whose one detail, under key, is also what Nomad displays; the
// caller sets the field of the event the detail mirrors.
func (c *Cluster) detailEvent(typ, key, value string) *api.TaskEvent {
	e := c.shownEvent(typ, value)
	e.Details[key] = value
	return e
}

func (c *Cluster) evReceived() *api.TaskEvent {
	return c.shownEvent(api.TaskReceived, "Task received by client")
}

func (c *Cluster) evSetup() *api.TaskEvent {
	e := c.detailEvent(api.TaskSetup, "message", "Building Task Directory")
	e.Message = e.DisplayMessage
	return e
}

func (c *Cluster) evStarted() *api.TaskEvent {
	return c.shownEvent(api.TaskStarted, "Task started by client")
}

func (c *Cluster) evTerminated(exitCode, signal int) *api.TaskEvent {
	e := c.taskEvent(api.TaskTerminated)
	e.ExitCode, e.Signal = exitCode, signal
	e.Details["exit_code"] = strconv.Itoa(exitCode)
	e.Details["signal"] = strconv.Itoa(signal)
	e.Details["oom_killed"] = "false"
	e.DisplayMessage = fmt.Sprintf("Exit Code: %d", exitCode)
	if signal != 0 {
		e.DisplayMessage += fmt.Sprintf(", Signal: %d", signal)
	}
	return e
}

func (c *Cluster) evRestartSignal(reason string) *api.TaskEvent {
	e := c.detailEvent(api.TaskRestartSignal, "restart_reason", reason)
	e.RestartReason = reason
	return e
}

func (c *Cluster) evRestarting(delay time.Duration, reason string) *api.TaskEvent {
	e := c.taskEvent(api.TaskRestarting)
	e.StartDelay = int64(delay)
	e.RestartReason = reason
	e.Details["restart_reason"] = reason
	e.Details["start_delay"] = strconv.FormatInt(int64(delay), 10)
	e.DisplayMessage = fmt.Sprintf("Task restarting in %v", delay)
	return e
}

func (c *Cluster) evNotRestarting(reason string) *api.TaskEvent {
	e := c.detailEvent(api.TaskNotRestarting, "restart_reason", reason)
	e.RestartReason = reason
	e.FailsTask = true
	e.Details["fails_task"] = "true"
	return e
}

func (c *Cluster) evKilling(timeout time.Duration) *api.TaskEvent {
	e := c.taskEvent(api.TaskKilling)
	e.KillTimeout = timeout
	e.Details["kill_timeout"] = timeout.String()
	e.DisplayMessage = fmt.Sprintf("Sent interrupt. Waiting %v before force killing", timeout)
	return e
}

func (c *Cluster) evKilled() *api.TaskEvent {
	return c.shownEvent(api.TaskKilled, "Task successfully killed")
}

func (c *Cluster) evShutdownDelay(d time.Duration) *api.TaskEvent {
	return c.shownEvent("Waiting for shutdown delay", fmt.Sprintf("Waiting for shutdown_delay of %v before killing the task.", d))
}

func (c *Cluster) evSkipShutdownDelay(d time.Duration) *api.TaskEvent {
	return c.shownEvent("Skipping shutdown delay", fmt.Sprintf("Skipping shutdown_delay of %v before killing the task.", d))
}

func (c *Cluster) evDriverFailure(msg string) *api.TaskEvent {
	e := c.detailEvent(api.TaskDriverFailure, "driver_error", msg)
	e.DriverError = msg
	return e
}

func (c *Cluster) evSiblingFailed(sibling string) *api.TaskEvent {
	e := c.taskEvent(api.TaskSiblingFailed)
	e.FailedSibling = sibling
	e.Details["failed_sibling"] = sibling
	e.DisplayMessage = fmt.Sprintf("Task's sibling %q failed", sibling)
	return e
}

// evSignaling is the template manager's event for a signal sent on a re-render.
func (c *Cluster) evSignaling(signal string) *api.TaskEvent {
	e := c.shownEvent(api.TaskSignaling, "Template re-rendered")
	e.TaskSignal = signalString(signal)
	e.Details["task_signal"] = e.TaskSignal
	return e
}

// evScriptRan is the template manager's event for a change script that succeeded (the
// simulated driver's exec always does).
func (c *Cluster) evScriptRan(s *api.ChangeScript) *api.TaskEvent {
	return c.shownEvent(taskHookMessage, fmt.Sprintf("Template successfully ran script %v with arguments: %v. Exit code: 0", Deref(s.Command), s.Args))
}

// maxTaskEvents is how many events Nomad keeps per task (structs.MaxRetainedTaskEvents).
const maxTaskEvents = 10

// appendEvent records e on the task state, keeping the latest events: at capacity the
// oldest is dropped (taskrunner appendTaskEvent).
func appendEvent(st *api.TaskState, e *api.TaskEvent) {
	if len(st.Events) >= maxTaskEvents {
		st.Events = append(make([]*api.TaskEvent, 0, maxTaskEvents), st.Events[len(st.Events)-maxTaskEvents+1:]...)
	}
	st.Events = append(st.Events, e)
}
