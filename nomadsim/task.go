package nomadsim

// The task runner: starting, exiting, restart policy, kill and in-place restart of one
// task. Every method runs with c.mu held.

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
		if tr.gen != gen || ar.clientTerminal() {
			return
		}
		if ar.stopping && tr.kind != kindPoststop {
			return
		}
		if c.takeFailStart(ar, tr.t.Name) {
			appendEvent(tr.st, c.evDriverFailure("failed to launch command with executor: simulated driver failure"))
			tr.exited(1, 0, true)
			return
		}
		tr.st.State = taskRunning
		tr.proc = true
		tr.st.StartedAt = c.clk.now()
		if !tr.st.StartedAt.After(tr.prestartAt) {
			// The prestart hooks (templates rendered) come strictly before the start,
			// however short the driver's start delay.
			tr.st.StartedAt = tr.prestartAt.Add(time.Microsecond)
		}
		tr.st.FinishedAt = time.Time{}
		appendEvent(tr.st, c.evStarted())
		tr.armExit()
		ar.touch()
		ar.servicesChanged()
		ar.progress()
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
	case tr.ar.jobType == api.JobTypeBatch || tr.ar.jobType == api.JobTypeSysbatch || tr.ephemeral():
		// Batch work and lifecycle hooks without a script finish promptly.
		after = 100 * time.Millisecond
	default:
		return
	}
	gen := tr.gen
	tr.ar.c.after(after, func() {
		if tr.gen != gen || tr.st.State != taskRunning || tr.killing {
			return
		}
		appendEvent(tr.st, tr.ar.c.evTerminated(code, 0))
		tr.exited(code, 0, false)
	})
}

// exited handles the end of the task's process (Terminated or Driver Failure already
// recorded): the restart policy decides whether it runs again.
func (tr *taskRun) exited(code, signal int, driverFailure bool) {
	ar, c := tr.ar, tr.ar.c
	tr.gen++
	now := c.clk.now()
	batchLike := ar.jobType == api.JobTypeBatch || ar.jobType == api.JobTypeSysbatch
	success := code == 0 && !driverFailure
	if ar.stopping || (success && (batchLike || tr.ephemeral())) {
		tr.die(false)
		ar.touch()
		ar.progress()
		return
	}
	pol := tr.restartPolicy()
	interval := deref(pol.Interval)
	if tr.windowStart.IsZero() || (interval > 0 && now.Sub(tr.windowStart) > interval) {
		tr.windowStart, tr.attempts = now, 0
	}
	tr.attempts++
	delay := deref(pol.Delay)
	reason := "Restart within policy"
	if tr.attempts > deref(pol.Attempts) {
		if deref(pol.Mode) != api.RestartPolicyModeDelay {
			appendEvent(tr.st, c.evNotRestarting("Exceeded allowed attempts "+itoa(deref(pol.Attempts))+" in interval "+interval.String()+" and mode is \"fail\""))
			tr.die(true)
			ar.touch()
			ar.progress()
			return
		}
		delay = tr.windowStart.Add(interval).Sub(now)
		reason = "Exceeded allowed attempts " + itoa(deref(pol.Attempts)) + " in interval " + interval.String() + " and mode is \"delay\""
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
	appendEvent(tr.st, c.evRestarting(delay, reason))
	tr.proc = false
	tr.st.State = taskPending
	tr.st.Restarts++
	tr.st.LastRestart = c.clk.now()
	tr.launched = true
	tr.gen++
	gen := tr.gen
	ar.touch()
	ar.servicesChanged()
	ar.updateClientStatus()
	c.after(delay, func() {
		if tr.gen != gen || ar.stopping || ar.clientTerminal() {
			return
		}
		tr.launch()
	})
}

func (tr *taskRun) restartPolicy() *api.RestartPolicy {
	if tr.t.RestartPolicy != nil {
		return tr.t.RestartPolicy
	}
	if tr.ar.tg.RestartPolicy != nil {
		return tr.ar.tg.RestartPolicy
	}
	return &api.RestartPolicy{Attempts: ptr(2), Interval: ptr(30 * time.Minute), Delay: ptr(15 * time.Second), Mode: ptr("fail")}
}

// die marks the task dead.
func (tr *taskRun) die(failed bool) {
	tr.gen++
	tr.launched = false
	tr.killing = false
	tr.proc = false
	tr.st.State = taskDead
	tr.st.Failed = failed
	tr.st.FinishedAt = tr.ar.c.clk.now()
	tr.stopTemplates()
	tr.ar.servicesChanged()
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
	if tr.st.State != taskRunning {
		// Not running (pending start or restart): it is simply not started again.
		appendEvent(tr.st, c.evKilled())
		tr.die(false)
		ar.touch()
		c.after(0, ar.progress)
		return
	}
	tr.killing = true
	tr.gen++
	gen := tr.gen
	// Killing first (the alloc runner's kill event), then the task's shutdown_delay with
	// the task pending (or skipped with no_shutdown_delay), then the signal.
	kt := deref(tr.t.KillTimeout)
	appendEvent(tr.st, c.evKilling(kt))
	sd := time.Duration(0)
	if tr.t.ShutdownDelay > 0 {
		if ar.noShutdown {
			appendEvent(tr.st, c.evSkipShutdownDelay(tr.t.ShutdownDelay))
		} else {
			sd = tr.t.ShutdownDelay
			appendEvent(tr.st, c.evShutdownDelay(sd))
			tr.st.State = taskPending
			ar.updateClientStatus()
		}
	}
	// The task service hook's PreKilling: the task's services go before the delay and
	// the signal (its process still runs until it exits).
	ar.servicesChanged()
	ar.touch()
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
			appendEvent(tr.st, c.evTerminated(code, sig))
			appendEvent(tr.st, c.evKilled())
			tr.die(false)
			ar.touch()
			ar.progress()
		})
	})
}

// restart is a user-requested in-place restart of a running task: Restart Signaled, the
// process exits (after kill_timeout if it ignores the signal), Terminated; done is closed
// then; Restarting and Started follow. The task-level shutdown_delay is not applied on
// restart, as in Nomad (issue 25289).
func (tr *taskRun) restart(reason string, done chan struct{}) error {
	return tr.restartWith(tr.ar.c.evRestartSignal(reason), done)
}

// restartWith is restart with the task runner's Restart event as its caller makes it (the
// template manager's has no reason); done may be nil.
func (tr *taskRun) restartWith(ev *api.TaskEvent, done chan struct{}) error {
	ar, c := tr.ar, tr.ar.c
	if tr.st == nil || tr.st.State != taskRunning || tr.killing {
		return errTaskNotRunning
	}
	appendEvent(tr.st, ev)
	tr.killing = true
	tr.gen++
	gen := tr.gen
	if done != nil {
		tr.waiters = append(tr.waiters, done)
	}
	// The task runner's Restart runs the pre-kill hooks first: the task's services go
	// (service hook PreKilling) before the signal.
	ar.servicesChanged()
	ar.touch()
	exitAfter, code, sig := 10*time.Millisecond, 130, 2
	if tr.script.ignoreSignal {
		exitAfter, code, sig = deref(tr.t.KillTimeout), 137, 9
	}
	c.after(exitAfter, func() {
		if tr.gen != gen {
			return
		}
		tr.killing = false
		appendEvent(tr.st, c.evTerminated(code, sig))
		// The process is gone before the restart call returns: its port refuses by then.
		tr.proc = false
		ar.syncInstances()
		tr.release()
		if ar.stopping {
			tr.die(false)
			ar.touch()
			ar.progress()
			return
		}
		tr.restartAfter(0, "")
	})
	return nil
}

// forceRestart restarts a task whatever its state (AllTasks): running tasks as restart
// does; tasks not running are run again in lifecycle order.
func (tr *taskRun) forceRestart(reason string, done chan struct{}) {
	if tr.st.State == taskRunning && !tr.killing {
		_ = tr.restart(reason, done)
		return
	}
	// A task that is not running (a finished prestart task, say) is run again as a
	// restart: Restart Signaled, Restarting, then Started when its turn comes.
	c := tr.ar.c
	appendEvent(tr.st, c.evRestartSignal(reason))
	appendEvent(tr.st, c.evRestarting(0, ""))
	tr.st.Restarts++
	tr.st.LastRestart = c.clk.now()
	tr.gen++
	tr.launched = false
	tr.st.State = taskPending
	tr.st.Failed = false
	close(done)
}
