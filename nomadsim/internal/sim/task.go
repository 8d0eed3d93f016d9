package sim

// The task runner: starting, exiting, restart policy, kill and in-place restart of one
// task. Every method runs with c.Mu held.

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// launch starts the task: after the driver's start delay it runs, unless a scripted driver
// failure is due.
func (tr *taskRun) launch() {
	ar, c := tr.ar, tr.ar.c
	tr.launched = true
	tr.gen++
	gen := tr.gen
	tr.prestartTemplates()
	c.after(tr.script.startDelay, func() {
		if tr.gen != gen || ar.ClientTerminal() {
			return
		}
		if ar.Stopping && tr.kind != kindPoststop {
			return
		}
		if c.takeFailStart(ar, tr.Task.Name) {
			appendEvent(tr.State, c.evDriverFailure("failed to launch command with executor: simulated driver failure"))
			tr.exited(1, 0, true)
			return
		}
		tr.State.State = TaskRunning
		tr.proc = true
		tr.loadConfig()
		tr.State.StartedAt = c.Clock.Now()
		if !tr.State.StartedAt.After(tr.prestartAt) {
			// The prestart hooks (templates rendered) come strictly before the start,
			// however short the driver's start delay.
			tr.State.StartedAt = tr.prestartAt.Add(time.Microsecond)
		}
		tr.State.FinishedAt = time.Time{}
		appendEvent(tr.State, c.evStarted())
		tr.runFirstRenderScripts()
		tr.armExit()
		ar.Touch()
		ar.ServicesChanged()
		ar.Progress()
	})
}

// armExit schedules the task's scripted exit, if any.
func (tr *taskRun) armExit() {
	s := tr.script
	var after time.Duration
	code := s.exitCode
	switch {
	case s.failAfter > 0 && (s.runFor == 0 || s.failAfter < s.runFor):
		after = s.failAfter
		if code == 0 {
			code = 1
		}
	case s.runFor > 0:
		after = s.runFor
	case tr.ar.JobType == api.JobTypeBatch || tr.ar.JobType == api.JobTypeSysbatch || tr.ephemeral():
		// Batch work and lifecycle hooks without a script finish promptly.
		after = 100 * time.Millisecond
	default:
		return
	}
	gen := tr.gen
	tr.ar.c.after(after, func() {
		if tr.gen != gen || tr.State.State != TaskRunning || tr.killing {
			return
		}
		appendEvent(tr.State, tr.ar.c.evTerminated(code, 0))
		tr.exited(code, 0, false)
	})
}

// exited handles the end of the task's process (Terminated or Driver Failure already
// recorded): the restart policy decides whether it runs again.
func (tr *taskRun) exited(code, signal int, driverFailure bool) {
	ar, c := tr.ar, tr.ar.c
	tr.gen++
	now := c.Clock.Now()
	batchLike := ar.JobType == api.JobTypeBatch || ar.JobType == api.JobTypeSysbatch
	success := code == 0 && !driverFailure
	if ar.Stopping || (success && (batchLike || tr.ephemeral())) {
		tr.die(false)
		ar.Touch()
		ar.Progress()
		return
	}
	pol := tr.restartPolicy()
	interval := Deref(pol.Interval)
	if tr.windowStart.IsZero() || (interval > 0 && now.Sub(tr.windowStart) > interval) {
		tr.windowStart, tr.attempts = now, 0
	}
	tr.attempts++
	delay := Deref(pol.Delay)
	reason := "Restart within policy"
	if tr.attempts > Deref(pol.Attempts) {
		if Deref(pol.Mode) != api.RestartPolicyModeDelay {
			appendEvent(tr.State, c.evNotRestarting("Exceeded allowed attempts "+itoa(Deref(pol.Attempts))+" in interval "+interval.String()+" and mode is \"fail\""))
			tr.die(true)
			ar.Touch()
			ar.Progress()
			return
		}
		delay = tr.windowStart.Add(interval).Sub(now)
		reason = "Exceeded allowed attempts " + itoa(Deref(pol.Attempts)) + " in interval " + interval.String() + " and mode is \"delay\""
		tr.windowStart, tr.attempts = time.Time{}, 0
	}
	// Nomad adds up to a quarter of jitter to the restart delay.
	if delay > 0 {
		delay += time.Duration(c.rng.Int64N(int64(delay)/4 + 1))
	}
	tr.restartAfter(delay, reason)
}

// restartAfter records the Restarting event and starts the task again after delay.
func (tr *taskRun) restartAfter(delay time.Duration, reason string) {
	ar, c := tr.ar, tr.ar.c
	appendEvent(tr.State, c.evRestarting(delay, reason))
	tr.proc = false
	tr.State.State = TaskPending
	tr.State.Restarts++
	tr.State.LastRestart = c.Clock.Now()
	tr.launched = true
	tr.gen++
	gen := tr.gen
	ar.Touch()
	ar.ServicesChanged()
	ar.updateClientStatus()
	c.after(delay, func() {
		if tr.gen != gen || ar.Stopping || ar.ClientTerminal() {
			return
		}
		tr.launch()
	})
}

func (tr *taskRun) restartPolicy() *api.RestartPolicy {
	if tr.Task.RestartPolicy != nil {
		return tr.Task.RestartPolicy
	}
	if tr.ar.Group.RestartPolicy != nil {
		return tr.ar.Group.RestartPolicy
	}
	return &api.RestartPolicy{Attempts: Ptr(2), Interval: Ptr(30 * time.Minute), Delay: Ptr(15 * time.Second), Mode: Ptr("fail")}
}

// die marks the task dead.
func (tr *taskRun) die(failed bool) {
	tr.gen++
	tr.launched = false
	tr.killing = false
	tr.proc = false
	tr.State.State = taskDead
	tr.State.Failed = failed
	tr.State.FinishedAt = tr.ar.c.Clock.Now()
	tr.stopTemplates()
	tr.ar.ServicesChanged()
	tr.release()
}

// release wakes everyone waiting for the task's process to exit.
func (tr *taskRun) release() {
	for _, w := range tr.waiters {
		close(w)
	}
	tr.waiters = nil
}

// kill stops the task for good (allocation stop): shutdown delay, Killing, the process
// exits (at once, or after kill_timeout if it ignores the signal), Terminated, Killed.
func (tr *taskRun) kill() {
	ar, c := tr.ar, tr.ar.c
	if tr.killing {
		return
	}
	if tr.State.State != TaskRunning {
		// Not running (pending start or restart): it is simply not started again.
		appendEvent(tr.State, c.evKilled())
		tr.die(false)
		ar.Touch()
		c.after(0, ar.Progress)
		return
	}
	tr.killing = true
	tr.gen++
	gen := tr.gen
	// Killing first (the alloc runner's kill event), then the task's shutdown_delay with
	// the task pending (or skipped with no_shutdown_delay), then the signal.
	kt := Deref(tr.Task.KillTimeout)
	appendEvent(tr.State, c.evKilling(kt))
	sd := time.Duration(0)
	if tr.Task.ShutdownDelay > 0 {
		if ar.noShutdown {
			appendEvent(tr.State, c.evSkipShutdownDelay(tr.Task.ShutdownDelay))
		} else {
			sd = tr.Task.ShutdownDelay
			appendEvent(tr.State, c.evShutdownDelay(sd))
			tr.State.State = TaskPending
			ar.updateClientStatus()
		}
	}
	// The task service hook's PreKilling: the task's services go before the delay and
	// the signal (its process still runs until it exits).
	ar.ServicesChanged()
	ar.Touch()
	c.after(sd, func() {
		if tr.gen != gen {
			return
		}
		exitAfter, code, sig := 10*time.Millisecond, 130, 2
		if tr.script.ignoreSignal {
			exitAfter, code, sig = kt, 137, 9
		}
		c.after(exitAfter, func() {
			if tr.gen != gen {
				return
			}
			appendEvent(tr.State, c.evTerminated(code, sig))
			appendEvent(tr.State, c.evKilled())
			tr.die(false)
			ar.Touch()
			ar.Progress()
		})
	})
}

// Restart is a user-requested in-place restart of a running task: Restart Signaled, the
// process exits (after kill_timeout if it ignores the signal), Terminated; done is closed
// then; Restarting and Started follow. The task-level shutdown_delay is not applied on
// restart, as in Nomad (issue 25289).
func (tr *taskRun) Restart(reason string, done chan struct{}) error {
	return tr.restartWith(tr.ar.c.evRestartSignal(reason), done)
}

// restartWith is restart with the task runner's Restart event as its caller makes it (the
// template manager's has no reason); done may be nil.
func (tr *taskRun) restartWith(ev *api.TaskEvent, done chan struct{}) error {
	ar, c := tr.ar, tr.ar.c
	if tr.State == nil || tr.State.State != TaskRunning || tr.killing {
		return errTaskNotRunning
	}
	appendEvent(tr.State, ev)
	tr.killing = true
	tr.gen++
	gen := tr.gen
	if done != nil {
		tr.waiters = append(tr.waiters, done)
	}
	// The task runner's Restart runs the pre-kill hooks first: the task's services go
	// (service hook PreKilling) before the signal.
	ar.ServicesChanged()
	ar.Touch()
	exitAfter, code, sig := 10*time.Millisecond, 130, 2
	if tr.script.ignoreSignal {
		exitAfter, code, sig = Deref(tr.Task.KillTimeout), 137, 9
	}
	c.after(exitAfter, func() {
		if tr.gen != gen {
			return
		}
		tr.killing = false
		appendEvent(tr.State, c.evTerminated(code, sig))
		// The process is gone before the restart call returns: its port refuses by then.
		tr.proc = false
		ar.syncInstances()
		tr.release()
		if ar.Stopping {
			tr.die(false)
			ar.Touch()
			ar.Progress()
			return
		}
		tr.restartAfter(0, "")
	})
	return nil
}

// ForceRestart restarts a task whatever its state (AllTasks): running tasks as restart
// does; tasks not running are run again in lifecycle order.
func (tr *taskRun) ForceRestart(reason string, done chan struct{}) {
	if tr.State.State == TaskRunning && !tr.killing {
		_ = tr.Restart(reason, done)
		return
	}
	// A task that is not running (a finished prestart task, say) is run again as a
	// restart: Restart Signaled, Restarting, then Started when its turn comes.
	c := tr.ar.c
	appendEvent(tr.State, c.evRestartSignal(reason))
	appendEvent(tr.State, c.evRestarting(0, ""))
	tr.State.Restarts++
	tr.State.LastRestart = c.Clock.Now()
	tr.gen++
	tr.launched = false
	tr.State.State = TaskPending
	tr.State.Failed = false
	close(done)
}
