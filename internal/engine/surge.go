package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// -surge: before the first batch each targeted group of a service job is scaled up by
// Spec.Surge through Nomad's job scale endpoint, and its new allocations are waited for
// until they pass the restart's health gate (and Nomad's deployment for the new job
// version, if the group has an update block, ends successfully); the batches then restart
// the planned allocations only; every end of the restart (success, failure, cancel, a "no")
// goes through finish, which scales each group back first. So a one- or two-instance
// service keeps serving while its allocations restart.
//
// Exactly once: every scale request is preceded by a persisted intent (Record.Surge) that
// holds the job's JobModifyIndex, and is sent with it as Nomad's check-and-set. A driver
// resuming the restart decides from the group's count in the job whether the request took
// effect: the target count means it did; the old count with the same JobModifyIndex means
// it did not (and it is sent again, once); any other count means someone else changed the
// group, and the restart leaves it as it is and says so.

// surgeMessage is the scaling event's message, naming the restart, so that an operator
// reading `nomad job scaling-events` knows who scaled the group and why.
func surgeMessage(id string, up bool) string {
	if up {
		return fmt.Sprintf("nomad-restart %s: surge for restart", id)
	}
	return fmt.Sprintf("nomad-restart %s: surge over, back to the original count", id)
}

// errNoScaler is why a restart cannot surge on a cluster client without Nomad's job scale
// endpoint.
var errNoScaler = errors.New("-surge needs Nomad's job scale endpoint, which this cluster client does not offer")

// CheckSurge refuses a planned -surge restart that cannot surge, before anything is
// recorded or changed: a job that is not a service job, a cluster that cannot scale, a
// targeted group whose count a scaling policy manages (unless SurgeIgnoreScaling). The
// error is one line naming the problem and the fix. Without -surge it does nothing.
func (e *Engine) CheckSurge(ctx context.Context, p *Plan) error {
	if p == nil || p.Record == nil || p.Record.Spec.Surge == 0 {
		return nil
	}
	rec := p.Record
	if rec.Spec.Surge < 0 {
		return fmt.Errorf("invalid -surge value %d: give a number of extra allocations per group, 1 or more", rec.Spec.Surge)
	}
	js, err := e.cluster.JobScale(ctx, rec.Namespace, rec.JobID)
	switch {
	case errors.Is(err, cluster.ErrNotSupported):
		return fmt.Errorf("%w; drop -surge", errNoScaler)
	case err != nil:
		return fmt.Errorf("reading job %q for -surge: %w", rec.JobID, err)
	}
	return restart.SurgeRefusal(rec.Spec, *js, recordGroups(rec))
}

// scaleAnswer classifies a scale request's error for restart.AfterScaleUp and
// AfterScaleDown.
func scaleAnswer(err error) restart.ScaleAnswer {
	switch {
	case err == nil:
		return restart.ScaleAccepted
	case errors.Is(err, cluster.ErrScaleConflict):
		return restart.ScaleConflict
	case errors.Is(err, cluster.ErrScaleBlocked):
		return restart.ScaleBlocked
	case errors.Is(err, cluster.ErrPermissionDenied):
		return restart.ScaleDenied
	case cluster.IsTransient(err):
		return restart.ScaleUnavailable
	}
	return restart.ScaleRefused
}

// recordGroups are the groups of the planned allocations, sorted.
func recordGroups(r *restart.Record) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range r.Allocs {
		if !seen[a.Group] {
			seen[a.Group] = true
			out = append(out, a.Group)
		}
	}
	sort.Strings(out)
	return out
}

// surgeOf returns a copy of group's surge state, or nil before its intent.
func (d *driver) surgeOf(group string) *restart.SurgeGroup {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.rec.Surge {
		if s.Group == group {
			c := s
			return &c
		}
	}
	return nil
}

// setSurgeLocked stores g as its group's surge state. The slice is replaced, never written
// in place: snapshots being stored share the old one.
func setSurgeLocked(r *restart.Record, g restart.SurgeGroup) {
	out := make([]restart.SurgeGroup, 0, len(r.Surge)+1)
	found := false
	for _, s := range r.Surge {
		if s.Group == g.Group {
			s, found = g, true
		}
		out = append(out, s)
	}
	if !found {
		out = append(out, g)
	}
	r.Surge = out
}

// saveSurge persists g, with an event when typ is not empty.
func (d *driver) saveSurge(ctx context.Context, g restart.SurgeGroup, typ restart.EventType, msg string) error {
	return d.step(ctx, func(r *restart.Record) {
		setSurgeLocked(r, g)
		if typ != "" {
			d.eventLocked(restart.Event{Type: typ, Message: msg})
		}
	})
}

// saveSurgeStep persists the group's state a surge decision asks to, before it is applied.
func (d *driver) saveSurgeStep(ctx context.Context, step restart.SurgeStep) error {
	if !step.Save {
		return nil
	}
	var typ restart.EventType
	if step.Event != "" {
		typ = restart.EventSurge
	}
	return d.saveSurge(ctx, step.Group, typ, step.Event)
}

// surgeFailed ends the restart failed because of the surge; finish scales back what was
// scaled up.
func (d *driver) surgeFailed(ctx context.Context, err error) error {
	msg := "Stopping job restart: " + err.Error()
	return d.finish(ctx, restart.StatusFailed, err.Error(), restart.EventFailed, msg)
}

// surgeUp scales every targeted group up and waits until its surge allocations are
// healthy, once per restart (a no-op without -surge or once the surge is up). It returns
// true when the batch may go on; false when the restart ended (failed, with the reason
// recorded) or the operator's intent changed (the caller obeys it).
func (d *driver) surgeUp(ctx context.Context, _ int) (bool, error) {
	if d.spec.Surge <= 0 {
		return true, nil
	}
	for _, g := range d.plannedGroups() {
		if ok, err := d.surgeGroupUp(ctx, g); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func (d *driver) plannedGroups() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return recordGroups(d.rec)
}

// surgeGroupUp brings one group's surge up: intent, request (at most once), wait. Each
// turn reads the job, lets restart.DecideSurgeUp decide from its facts and the recorded
// state, and applies the decision. The turns after a request Nomad did not take are paced
// and bounded by the engine's retry budget (see giveup.go).
func (d *driver) surgeGroupUp(ctx context.Context, group string) (bool, error) {
	pause := cluster.NewBackoff(d.e.scalePolicy())
	for {
		sg := d.surgeOf(group)
		if sg != nil && sg.Phase != restart.SurgeScalingUp {
			return true, nil // the decision's too, without a read
		}
		js, err := d.e.cluster.JobScale(ctx, d.jobNS, d.jobID)
		switch {
		case errors.Is(err, cluster.ErrNotSupported):
			return false, d.surgeFailed(ctx, errNoScaler)
		case err != nil:
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			// The cluster retried what passes, within its own budget.
			err = fmt.Errorf("reading job %q for the surge: %w", d.jobID, err)
			if cluster.IsTransient(err) {
				if werr := d.warnRetriesSpent(ctx, nil, fmt.Sprintf("the read of job %q for the surge", d.jobID), nil, err); werr != nil {
					return false, werr
				}
			}
			return false, d.surgeFailed(ctx, err)
		}
		step := restart.DecideSurgeUp(d.spec, sg, group, *js)
		if err := d.saveSurgeStep(ctx, step); err != nil {
			return false, err
		}
		g := step.Group
		switch step.Action {
		case restart.SurgeDone:
			return true, nil
		case restart.SurgeRefuse:
			return false, d.surgeFailed(ctx, errors.New(step.Why))
		case restart.SurgeLeave:
			return false, d.surgeLeft(ctx, g, step.Why, true)
		case restart.SurgeSend:
			res, err := d.e.cluster.ScaleGroup(ctx, d.jobNS, d.jobID, group, step.Count, g.JobModifyIndex, surgeMessage(d.id, true))
			if err != nil {
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				if again, err := d.scaleUpRefused(ctx, group, err, pause); !again {
					return false, err
				}
				continue
			}
			g.ScaledIndex = res.JobModifyIndex
			if err := d.saveSurge(ctx, g, "", ""); err != nil {
				return false, err
			}
		}
		ok, err := d.awaitSurgeHealthy(ctx, g, js.Groups[group].Rolling)
		if err != nil || !ok {
			return ok, err
		}
		g.Phase, g.UpTime = restart.SurgeUp, d.e.now()
		return true, d.saveSurge(ctx, g, restart.EventSurge, fmt.Sprintf("Surge allocations of group %q are healthy", group))
	}
}

// scaleUpRefused applies restart.AfterScaleUp to a scale-up request Nomad did not take: it
// reports whether to read the job again (after a pause, or the deployment's end, while the
// budget lasts); else the restart ended failed, or err is the error to return.
func (d *driver) scaleUpRefused(ctx context.Context, group string, err error, pause *cluster.Backoff) (bool, error) {
	answer := scaleAnswer(err)
	switch restart.AfterScaleUp(answer) {
	case restart.ScalePauseRead:
		if answer == restart.ScaleUnavailable {
			d.log.Warn("scaling for the surge failed; checking the job and retrying", "group", group, "err", err)
		}
		return d.pauseScaleUp(ctx, group, err, pause)
	case restart.ScaleAwaitDeployment:
		if err := d.awaitDeploymentEnd(ctx, 0, d.surgeDeadline(group)); err != nil {
			return false, d.surgeFailed(ctx, fmt.Errorf("scaling group %q for the surge: %w", group, err))
		}
		// Paced and bounded too: a job whose deployments keep blocking the scale ends.
		return d.pauseScaleUp(ctx, group, err, pause)
	}
	var tooMany *cluster.JobMaxCountError
	switch {
	case answer == restart.ScaleDenied:
		return false, d.surgeFailed(ctx, fmt.Errorf("-surge: the token may not scale job %q (%v); it needs the scale-job capability (or submit-job) in namespace %q, or drop -surge", d.jobID, cluster.ErrPermissionDenied, nsName(d.jobNS)))
	case errors.As(err, &tooMany):
		// The limit could not be read at planning (CheckSurge refuses it there otherwise).
		return false, d.surgeFailed(ctx, errors.New(restart.SurgePastMaxCount(group, tooMany.Nomad, tooMany.Max-d.countBeforeSurge(group, tooMany.Total), len(d.plannedGroups()))))
	}
	return false, d.surgeFailed(ctx, fmt.Errorf("scaling group %q for the surge: %w", group, err))
}

// pauseScaleUp waits before the surge reads the job again after a scale-up Nomad did not
// take. Once the budget is spent it records a warning and fails the restart, and reports
// false.
func (d *driver) pauseScaleUp(ctx context.Context, group string, err error, pause *cluster.Backoff) (bool, error) {
	if pause.Wait(ctx) {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if werr := d.warnRetriesSpent(ctx, nil, fmt.Sprintf("the scale-up of group %q", group), pause, err); werr != nil {
		return false, werr
	}
	return false, d.surgeFailed(ctx, fmt.Errorf("scaling group %q for the surge: %w (gave up after %s)", group, err, plural(pause.Attempts()+1, "attempt")))
}

// countBeforeSurge is the job's count, summed over its groups, before any of this restart's
// surges, from total, the sum a scale-up of group asked for: less this group's surge and
// those of the groups already up.
func (d *driver) countBeforeSurge(group string, total int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	total -= d.spec.Surge
	for _, s := range d.rec.Surge {
		if s.Group != group && s.Phase == restart.SurgeUp {
			total -= s.To - s.From
		}
	}
	return total
}

// surgeLeft records that the group's count is no longer this restart's, and fails the
// restart when fail is set.
func (d *driver) surgeLeft(ctx context.Context, g restart.SurgeGroup, why string, fail bool) error {
	g.Phase, g.Note = restart.SurgeLeft, why+"; left as is"
	if err := d.saveSurge(ctx, g, restart.EventWarning, "Surge: "+g.Note); err != nil {
		return err
	}
	if fail {
		return d.surgeFailed(ctx, errors.New(why))
	}
	return nil
}

// surgeDeadline bounds each wait of the surge: the group's healthy deadline (Nomad's
// time), as local time.
func (d *driver) surgeDeadline(group string) time.Duration {
	_, dl := d.spec.HealthTimes(group)
	if scale := d.e.health.TimeScale; scale > 0 {
		dl = time.Duration(float64(dl) / scale)
	}
	return dl
}

// surgeDown scales every group whose surge is (or may be) up back to its original count,
// at the top of finish: every end of a restart restores the count first. A count someone
// else changed is left as it is and recorded; a count that cannot be restored (permission,
// Nomad refusing past the deadline, a cluster client that cannot scale) is recorded with
// what restores it, and the restart still ends. It returns an error only when ctx ends or
// the record cannot be written; the next driver then takes it up again.
func (d *driver) surgeDown(ctx context.Context) error {
	d.mu.Lock()
	var open []string
	for _, s := range d.rec.Surge {
		if !s.Phase.Done() {
			open = append(open, s.Group)
		}
	}
	d.mu.Unlock()
	for _, g := range open {
		if err := d.surgeGroupDown(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// surgeGroupDown scales one group back: each turn reads the job, lets
// restart.DecideSurgeDown decide from its facts and the recorded state, and applies the
// decision; restart.AfterScaleDown decides what follows a request's answer.
func (d *driver) surgeGroupDown(ctx context.Context, group string) error {
	giveUp := time.Now().Add(d.surgeDeadline(group))
	pause := cluster.NewBackoff(d.e.scalePolicy())
	for {
		sg := d.surgeOf(group)
		if sg == nil || sg.Phase.Done() {
			return nil
		}
		js, err := d.e.cluster.JobScale(ctx, d.jobNS, d.jobID)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, cluster.ErrNotSupported):
			return d.surgeLeft(ctx, *sg, "this cluster client cannot scale jobs, so the surge could not be scaled back", false)
		case err != nil:
			return d.surgeNotRestored(ctx, *sg, err)
		}
		step := restart.DecideSurgeDown(*sg, *js, d.e.now())
		if err := d.saveSurgeStep(ctx, step); err != nil {
			return err
		}
		switch step.Action {
		case restart.SurgeDone:
			return nil
		case restart.SurgeLeave:
			return d.surgeLeft(ctx, step.Group, step.Why, false)
		case restart.SurgeAwaitGone:
			return d.awaitSurgeGone(ctx, step.Group)
		}
		g := step.Group
		undrain, err := d.drainScaleDown(ctx, group, step.Count)
		if err != nil {
			return err
		}
		res, err := d.e.cluster.ScaleGroup(ctx, d.jobNS, d.jobID, group, step.Count, g.JobModifyIndex, surgeMessage(d.id, false))
		if err != nil {
			// Nothing stops: the drained instances serve again. (After a scale-down that
			// went through, Nomad's client deregisters them, the drain's checks with them.)
			undrain()
		}
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		answer := scaleAnswer(err)
		switch restart.AfterScaleDown(answer, time.Now().Before(giveUp)) {
		case restart.ScaleProceed:
			g.ScaledIndex = res.JobModifyIndex
			if err := d.saveSurge(ctx, g, "", ""); err != nil {
				return err
			}
		case restart.ScalePauseRead:
			if answer == restart.ScaleUnavailable {
				d.log.Warn("scaling back after the surge failed; checking the job and retrying", "group", group, "err", err)
			}
			if !pause.Wait(ctx) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return d.surgeNotRestored(ctx, g, fmt.Errorf("%w (gave up after %s in %s)", err, plural(pause.Attempts()+1, "attempt"), pause.Elapsed().Round(time.Millisecond)))
			}
		case restart.ScaleAwaitDeployment:
			if werr := d.unblockScaleDown(ctx, g, giveUp); werr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return d.surgeNotRestored(ctx, g, err)
			}
		default:
			return d.surgeNotRestored(ctx, g, err)
		}
	}
}

// surgeNotRestored records that the group could not be scaled back, with the command that
// restores its count.
func (d *driver) surgeNotRestored(ctx context.Context, g restart.SurgeGroup, err error) error {
	return d.surgeLeft(ctx, g, fmt.Sprintf("could not scale group %q back to %d (%v); restore it with `nomad job scale -namespace %s %s %s %d`",
		g.Group, g.From, err, nsName(d.jobNS), d.jobID, g.Group, g.From), false)
}

// unblockScaleDown clears the way of a scale-down Nomad refused while a deployment runs:
// the surge's own is failed (restart.SurgeGroup.OwnsDeployment), so that the count comes
// back now; another's is waited for until giveUp.
func (d *driver) unblockScaleDown(ctx context.Context, g restart.SurgeGroup, giveUp time.Time) error {
	if failed, err := d.failSurgeDeployment(ctx, g); err != nil {
		d.log.Warn("failing the surge's own deployment", "group", g.Group, "err", err)
	} else if failed {
		return nil
	}
	return d.awaitDeploymentEnd(ctx, 0, time.Until(giveUp))
}

// failSurgeDeployment fails the job's active deployment when it is the one the surge's
// scale-up made, and reports whether it did.
func (d *driver) failSurgeDeployment(ctx context.Context, sg restart.SurgeGroup) (bool, error) {
	if sg.UpIndex == 0 {
		return false, nil // no deployment can be the surge's: spare the read
	}
	dep, _, err := d.e.cluster.LatestDeployment(ctx, d.jobNS, d.jobID, 0)
	if err != nil || dep == nil || !sg.OwnsDeployment(dep.Active(), dep.JobSpecModifyIndex) {
		return false, err
	}
	if err := d.e.cluster.FailDeployment(ctx, d.jobNS, dep.ID); err != nil {
		return false, err
	}
	return true, d.saveSurge(ctx, sg, restart.EventSurge, fmt.Sprintf("Failed deployment %q of the surge of group %q, so that it can scale back", short(dep.ID), sg.Group))
}

// plannedIDs are the planned allocations and their replacements: the allocations the
// restart handles, which are not surge allocations.
func (d *driver) plannedIDs() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.rec.Allocs))
	for _, a := range d.rec.Allocs {
		out[a.ID] = true
		if a.Replacement != "" {
			out[a.Replacement] = true
		}
	}
	return out
}

// surgeAllocs are the group's live allocations created since the surge's intent that the
// restart does not handle: the surge's own, newest first.
func surgeAllocs(allocs []*restart.Alloc, g restart.SurgeGroup, planned map[string]bool) []*restart.Alloc {
	var out []*restart.Alloc
	for _, a := range allocs {
		if a.Group != g.Group || planned[a.ID] || a.DesiredStatus != restart.DesiredRun || a.NextAllocation != "" ||
			a.CreateIndex <= g.JobModifyIndex {
			continue
		}
		switch a.ClientStatus {
		case restart.ClientComplete, restart.ClientFailed, restart.ClientLost:
			continue
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex > out[j].CreateIndex })
	return out
}

// awaitSurgeHealthy waits until the group's surge allocations serve and pass the health
// gate, and Nomad's deployment for the scaled version (rolling groups) ended successfully.
// It returns false when the operator's intent changed, or when the restart ended failed.
func (d *driver) awaitSurgeHealthy(ctx context.Context, g restart.SurgeGroup, rolling bool) (bool, error) {
	deadline := d.surgeDeadline(g.Group)
	giveUp := time.NewTimer(deadline)
	defer giveUp.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := d.watchJobAllocs(wctx)
	planned := d.plannedIDs()
	want := g.To - g.From
	why := "the surge allocations to be placed"
	for {
		var allocs []*restart.Alloc
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case u := <-updates:
			if u.err != nil {
				return false, fmt.Errorf("reading the allocations of job %q for the surge: %w", d.jobID, u.err)
			}
			allocs = u.allocs
		case <-d.changed:
			if d.intentChanged() {
				return false, nil
			}
			continue
		case <-giveUp.C:
			_, dl := d.spec.HealthTimes(g.Group)
			return false, d.surgeFailed(ctx, fmt.Errorf("surge allocations of group %q not healthy within the healthy deadline of %s: waited for %s", g.Group, dl, why))
		}
		surge := surgeAllocs(allocs, g, planned)
		serving := 0
		for _, a := range surge {
			if restart.Serving(a) {
				serving++
			}
		}
		if len(surge) < want || serving < want {
			why = fmt.Sprintf("%d of %d surge allocations running", serving, want)
			continue
		}
		cancel()
		ok, err := d.gateSurge(ctx, surge[:want], g.Group, giveUp.C)
		if err != nil || !ok {
			return ok, err
		}
		break
	}
	if !rolling {
		return true, nil
	}
	if err := d.awaitDeploymentEnd(ctx, g.ScaledIndex, deadline); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, d.surgeFailed(ctx, fmt.Errorf("surge of group %q: %w", g.Group, err))
	}
	return true, nil
}

// intentChanged reports whether the operator asked to pause or cancel.
func (d *driver) intentChanged() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := d.rec.Control.Intent
	return i == restart.IntentCancel || i == restart.IntentPause
}

// gateSurge runs the health gate on each surge allocation at once. A failure ends the
// restart failed (and finish scales back).
func (d *driver) gateSurge(ctx context.Context, allocs []*restart.Alloc, group string, giveUp <-chan time.Time) (bool, error) {
	if d.spec.Health == restart.HealthChecks {
		// Read the job's checks once here, with the driver's context: the gates below are
		// canceled when one fails, and a read canceled then must not be what every later
		// gate of this driver finds.
		if _, _, err := d.readinessDeps(ctx); err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, d.surgeFailed(ctx, err)
		}
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type verdict struct {
		id  string
		err error
	}
	errs := make(chan verdict, len(allocs))
	for _, a := range allocs {
		go func() { errs <- verdict{a.ID, d.surgeGate(gctx, a)} }()
	}
	for pending := len(allocs); pending > 0; {
		select {
		case v := <-errs:
			pending--
			var f *allocFailure
			switch {
			case errors.As(v.err, &f):
				return false, d.surgeFailed(ctx, fmt.Errorf("surge allocation %q of group %q is not healthy: %v", short(v.id), group, f.err))
			case v.err != nil:
				return false, v.err
			}
		case <-d.changed:
			if d.intentChanged() {
				return false, nil
			}
		case <-giveUp:
			_, dl := d.spec.HealthTimes(group)
			return false, d.surgeFailed(ctx, fmt.Errorf("surge allocations of group %q not healthy within the healthy deadline of %s", group, dl))
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

// awaitDeploymentEnd waits until the job has no active deployment of a version at or past
// sinceIndex (a JobSpecModifyIndex; 0: any), and fails when that deployment failed or was
// cancelled. With sinceIndex set it also waits for the deployment to appear, as Nomad makes
// it when it processes the scale's evaluation. The blocking reads retry inside the cluster.
func (d *driver) awaitDeploymentEnd(ctx context.Context, sinceIndex uint64, within time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, max(within, time.Millisecond))
	defer cancel()
	var index uint64
	for {
		dep, next, err := d.e.cluster.LatestDeployment(wctx, d.jobNS, d.jobID, index)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return fmt.Errorf("the deployment of job %q did not end within %s", d.jobID, within)
		case err != nil:
			return err
		}
		index = max(next, index+1)
		switch {
		case dep == nil || dep.JobSpecModifyIndex < sinceIndex:
			if sinceIndex == 0 {
				return nil
			}
			// Not made yet; blocking queries see it appear.
		case dep.Active():
			d.log.Info("waiting for the deployment", "deployment", dep.ID, "status", dep.Status)
		case dep.Status == "successful" || sinceIndex == 0:
			return nil
		default:
			return fmt.Errorf("deployment %q of the scaled job is %s: %s", short(dep.ID), dep.Status, dep.StatusDescription)
		}
	}
}

// awaitSurgeGone waits (bounded by the group's healthy deadline) until the group runs no
// more allocations than its original count, so that the restart ends with the surge gone.
// Running out of time is recorded, not an error: the count is restored, Nomad stops the
// extra allocations in its own time.
func (d *driver) awaitSurgeGone(ctx context.Context, g restart.SurgeGroup) error {
	deadline := d.surgeDeadline(g.Group)
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	updates := d.watchJobAllocs(wctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			d.log.Warn("surge allocations still running after the scale-down", "group", g.Group)
			return nil
		case u := <-updates:
			if u.err != nil {
				d.log.Warn("reading the allocations after the scale-down", "err", u.err)
				return nil
			}
			live := 0
			for _, a := range u.allocs {
				if a.Group == g.Group && a.DesiredStatus == restart.DesiredRun && a.NextAllocation == "" &&
					!strings.Contains(" complete failed lost ", " "+a.ClientStatus+" ") {
					live++
				}
			}
			if live <= g.From {
				return nil
			}
		}
	}
}

// surgeGate holds a surge allocation that serves until the restart's health gate says
// healthy (nil) or failed (an allocFailure): the same gate as a restarted allocation's,
// with the group's min-healthy time and deadline, its checks under -health checks.
func (d *driver) surgeGate(ctx context.Context, a *restart.Alloc) error {
	// No deadline in the gate: it would run from the tasks' start, long past for a driver
	// resuming the surge; the caller's deadline runs from when this driver waits.
	minH, _ := d.spec.HealthTimes(a.Group)
	tasks := runningTasks(a)
	cfg := health.Config{Mode: restart.HealthRunning, Tasks: tasks, MinHealthy: minH}
	var watched *health.Sources // nil: no checks to watch
	if d.spec.Health == restart.HealthChecks {
		job, src, err := d.readinessDeps(ctx)
		if err != nil {
			return &allocFailure{err}
		}
		cfg.Mode, cfg.Tasks, cfg.Checks, watched = restart.HealthChecks, health.LongRunning(job, a.Group, tasks), health.AllocChecks(job, a), &src
	}
	cfg.Since = tasksStarted(a, cfg.Tasks)
	d.e.observeTimes(a)
	g := health.NewReadiness(cfg)
	g.ObserveAlloc(a)
	return d.judgeReadiness(ctx, g, watched, a.ID, "surge allocation", a.ModifyIndex, nil)
}
