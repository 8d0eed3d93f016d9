package fleet

import (
	"fmt"
	"slices"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Decision is what a fleet's driver does next, as Next decides it from the recorded fleet.
type Decision struct {
	// Start lists the pending jobs (indexes into Fleet.Jobs, in the fleet's order) whose
	// child the driver creates now.
	Start []int
	// Steer lists the running children to give the fleet's intent. Each intent is forwarded
	// once: the driver records it in Job.Steered after writing it to the child's control.
	Steer []Steer
	// Abandon lists the pending jobs that will never start, because the fleet was canceled
	// or failed; Record marks them canceled with Reason, so a finished fleet has no job
	// left pending.
	Abandon []int
	// Held lists the pending jobs an upstream that failed holds for good while the failure
	// budget still holds (no question will be asked), or once the fleet fails: Record
	// settles them skipped, with the reason. The upstream's failure is the one counted
	// (a job of the fleet that failed, or one outside it, tally.outsideFailed), not theirs.
	Held []Held
	// Status is the fleet's status after this decision.
	Status restart.Status
	// Reason says why the fleet stopped starting jobs or ended, for its events and status.
	Reason string
}

// Held is one job an upstream's failure holds.
type Held struct {
	Job  int
	Gate Gate
}

// Steer is one child to give an intent to.
type Steer struct {
	Job    int // index into Fleet.Jobs
	Intent restart.Intent
}

// Record writes the parts of d that need no cluster into f: the status and the abandoned
// jobs. Start and Steer are the driver's to carry out and then record (Observe, Job.Steered).
func (d Decision) Record(f *Fleet) {
	f.Status = d.Status
	for _, i := range d.Abandon {
		f.Jobs[i] = settle(f.Jobs[i], JobCanceled, d.Reason)
	}
	for _, h := range d.Held {
		f.Jobs[h.Job] = settle(f.Jobs[h.Job], JobSkipped, h.Gate.Failed)
		// Its own downstream jobs are held in turn, naming why.
		f.Jobs[h.Job].Evidence.Unready = "was not restarted: " + h.Gate.Failed
	}
}

// Next decides, from the fleet as recorded (the children's statuses observed), what to do
// now. It is a pure function of f so that a resumed or adopting driver decides exactly as
// the one it replaces would have.
func Next(f Fleet) Decision {
	if f.Status.Terminal() {
		return Decision{Status: f.Status}
	}
	t := tallyOf(f)
	switch f.Control.Intent {
	case restart.IntentCancel:
		return decideCancel(f, t)
	case restart.IntentPause:
		return decidePause(f, t)
	}
	return decideRun(f, t)
}

// tally counts the fleet's jobs by what the rules need.
type tally struct {
	pending, running, failed, canceled int
	// outsideFailed counts the upstreams outside the fleet that gave no evidence (never
	// healthy, gone): each is one failure against the budget, as a job of the fleet that
	// failed would be, however many jobs it holds. outsideHeld are those of them an
	// operator did not release: the jobs after them were skipped, which fails the fleet at
	// its end (released, the jobs went on and were restarted).
	outsideFailed, outsideHeld int
}

func tallyOf(f Fleet) tally {
	var t tally
	for _, o := range f.Outside {
		if o.Evidence.Unready != "" {
			t.outsideFailed++
			if !o.Evidence.Released {
				t.outsideHeld++
			}
		}
	}
	for _, j := range f.Jobs {
		switch j.Status {
		case JobPending:
			t.pending++
		case JobRunning:
			t.running++
		case JobFailed:
			t.failed++
		case JobCanceled:
			t.canceled++
		}
	}
	return t
}

// done reports whether every job has ended.
func (t tally) done() bool { return t.pending == 0 && t.running == 0 }

// failures counts what the failure budget is spent on: jobs that failed and upstreams
// outside the fleet that gave no evidence.
func (t tally) failures() int { return t.failed + t.outsideFailed }

// budgetSpent reports whether more failed than the fleet allows: from then on nothing
// new starts.
func (t tally) budgetSpent(o Options) bool { return t.failures() > o.MaxFailedJobs }

// failuresText names the failures: "2 jobs", "1 job and 1 upstream outside the fleet".
func (t tally) failuresText() string {
	switch {
	case t.outsideFailed == 0:
		return plural(t.failed, "job")
	case t.failed == 0:
		return plural(t.outsideFailed, "upstream") + " outside the fleet"
	}
	return plural(t.failed, "job") + " and " + plural(t.outsideFailed, "upstream") + " outside the fleet"
}

// decideCancel stops everything: the children are canceled, the jobs not started are
// abandoned, and the fleet is canceled once no child runs, so that its end is not
// reported while allocations are still mid-restart.
func decideCancel(f Fleet, t tally) Decision {
	d := Decision{Steer: steer(f.Jobs, restart.IntentCancel), Abandon: pending(f.Jobs), Reason: "the fleet was canceled" + by(f.Control)}
	d.Status = inFlight(f.Status)
	if t.running == 0 {
		d.Status = restart.StatusCanceled
	}
	return d
}

// decidePause starts nothing and forwards the pause. The fleet is paused at once rather
// than when its children have paused: its own promise, no new start, holds from now, and
// each child shows its own state. A fleet whose jobs all ended, or whose budget is spent,
// ends or asks as it would running: a pause cannot make a result wait.
func decidePause(f Fleet, t tally) Decision {
	if t.done() || (t.budgetSpent(f.Options) && t.running == 0) {
		d := decideRun(f, t)
		d.Steer = nil
		return d
	}
	return Decision{Steer: steer(f.Jobs, restart.IntentPause), Status: restart.StatusPaused, Reason: "the fleet was paused" + by(f.Control)}
}

// decideRun resumes the children the fleet paused, starts pending jobs up to the
// parallel limit while the failure budget holds, and ends the fleet when nothing is left.
func decideRun(f Fleet, t tally) Decision {
	steers := steer(f.Jobs, restart.IntentRun)
	switch {
	case t.done():
		return finish(f, t)
	case t.budgetSpent(f.Options) && t.running == 0:
		return budgetOutcome(f, t)
	case t.budgetSpent(f.Options):
		return Decision{Steer: steers, Status: restart.StatusRunning, Reason: spentReason(f, t) + "; no new job starts while the running ones finish"}
	}
	return Decision{Start: startable(f), Steer: steers, Held: held(f), Status: restart.StatusRunning}
}

// held lists the pending jobs whose upstream failed (Gate.Failed).
func held(f Fleet) []Held {
	var out []Held
	for i, j := range f.Jobs {
		if j.Status != JobPending || len(j.After) == 0 {
			continue
		}
		if g := f.GateOf(i); g.Failed != "" {
			out = append(out, Held{Job: i, Gate: g})
		}
	}
	return out
}

// finish is the verdict once every job ended.
func finish(f Fleet, t tally) Decision {
	if t.failed == 0 && t.canceled == 0 && t.outsideHeld == 0 {
		return Decision{Status: restart.StatusSucceeded, Reason: "every job was restarted or skipped"}
	}
	reason := fmt.Sprintf("%s of %d failed and %d canceled", plural(t.failed, "job"), len(f.Jobs), t.canceled)
	if t.outsideHeld > 0 {
		// The jobs it held were skipped, so the count of jobs alone would not say why.
		outside := fmt.Sprintf("%s outside the fleet gave no evidence", plural(t.outsideHeld, "upstream"))
		reason += "; " + outside
		if t.failed == 0 && t.canceled == 0 {
			reason = outside + ": the jobs after it were skipped"
		}
	}
	return Decision{Status: restart.StatusFailed, Reason: reason}
}

// budgetOutcome applies -on-error once the budget is spent and no child runs.
func budgetOutcome(f Fleet, t tally) Decision {
	reason := spentReason(f, t)
	if f.Options.OnError == restart.OnErrorAsk {
		return Decision{Status: restart.StatusWaiting, Reason: reason}
	}
	return failPending(f, reason+" (-on-error fail)")
}

// failPending ends the fleet failed for reason: the jobs an upstream's failure holds are
// skipped with that upstream's reason (it, not the fleet's end, is why they were not
// restarted), the other pending jobs abandoned with reason.
func failPending(f Fleet, reason string) Decision {
	d := Decision{Held: held(f), Status: restart.StatusFailed, Reason: reason}
	for _, i := range pending(f.Jobs) {
		if !slices.ContainsFunc(d.Held, func(h Held) bool { return h.Job == i }) {
			d.Abandon = append(d.Abandon, i)
		}
	}
	return d
}

func spentReason(f Fleet, t tally) string {
	return fmt.Sprintf("%s failed, more than -max-failed-jobs %d allows", t.failuresText(), f.Options.MaxFailedJobs)
}

// Upcoming lists, in the fleet's order, the first n pending jobs that Next would start
// as slots free, none when it would start nothing more (the fleet ended, is paused or
// canceled, or its failure budget is spent). A driver plans them ahead, while the running
// jobs restart, so that a job starts the moment its slot frees.
func Upcoming(f Fleet, n int) []int {
	if startsNothing(f) {
		return nil
	}
	return pendingFree(f, n)
}

// startsNothing reports whether Next would start no job whatever happens meanwhile: the
// fleet ended, is paused or canceled, or its failure budget is spent (until an operator's
// yes). Nothing is prepared for a start then: neither a plan ahead nor an upstream's
// evidence.
func startsNothing(f Fleet) bool {
	return f.Status.Terminal() || f.Control.Intent == restart.IntentCancel || f.Control.Intent == restart.IntentPause ||
		tallyOf(f).budgetSpent(f.Options)
}

// pendingFree lists, in order, the first n pending jobs waiting neither for another
// restart nor for an upstream's evidence. A job held by its upstreams is passed over, so
// that with -max-parallel-jobs the rest of its wave, and the jobs of later waves whose
// upstreams are done, go on.
func pendingFree(f Fleet, n int) []int {
	var out []int
	for i, j := range f.Jobs {
		if len(out) >= n {
			break
		}
		if j.Status == JobPending && j.BusyWith == "" && (len(j.After) == 0 || f.GateOf(i).Free()) {
			out = append(out, i)
		}
	}
	return out
}

// startable picks, in the fleet's order, the pending jobs to start in the free slots. A
// job waiting for another restart is passed over rather than waited on, so one busy job
// does not hold up the fleet.
func startable(f Fleet) []int {
	return pendingFree(f, f.Options.MaxParallelJobs-tallyOf(f).running)
}

// steer lists the running children that have not yet been given intent by the fleet. A
// child the fleet canceled is never given another intent: a cancel is final. Under run,
// only the children the fleet paused are resumed; one an operator paused alone is left so.
func steer(jobs []Job, intent restart.Intent) []Steer {
	var out []Steer
	for i, j := range jobs {
		given := j.Steered
		if given == "" {
			given = restart.IntentRun
		}
		if j.Status == JobRunning && given != intent && given != restart.IntentCancel {
			out = append(out, Steer{Job: i, Intent: intent})
		}
	}
	return out
}

func pending(jobs []Job) []int {
	var out []int
	for i, j := range jobs {
		if j.Status == JobPending {
			out = append(out, i)
		}
	}
	return out
}

// inFlight is the status a fleet keeps while its children wind down: paused or waiting
// stay what they are, anything else is running.
func inFlight(s restart.Status) restart.Status {
	if s == restart.StatusPaused || s == restart.StatusWaiting {
		return s
	}
	return restart.StatusRunning
}

func by(c restart.Control) string {
	if c.By == "" {
		return ""
	}
	return " by " + c.By
}

// plural is "1 job", "2 jobs".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
