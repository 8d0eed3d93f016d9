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
	sc, ok := e.cluster.(cluster.Scaler)
	if !ok {
		return errors.New("-surge needs Nomad's job scale endpoint, which this cluster client does not offer; drop -surge")
	}
	js, err := retry(ctx, func() (*cluster.JobScale, error) { return sc.JobScale(ctx, rec.Namespace, rec.JobID) })
	if err != nil {
		return fmt.Errorf("reading job %q for -surge: %w", rec.JobID, err)
	}
	return surgeRefusal(rec.Spec, js, recordGroups(rec))
}

// surgeRefusal says why the job's groups cannot surge, nil when they can.
func surgeRefusal(spec restart.Spec, js *cluster.JobScale, groups []string) error {
	if js.Type != "service" {
		return fmt.Errorf("-surge scales service jobs only, and job %q is a %s job; drop -surge", js.ID, js.Type)
	}
	if js.Stopped {
		return fmt.Errorf("job %q is stopped, so -surge cannot scale it; drop -surge", js.ID)
	}
	for _, g := range groups {
		gs, ok := js.Groups[g]
		if !ok {
			return fmt.Errorf("group %q is no longer in job %q, so -surge cannot scale it; plan the restart again", g, js.ID)
		}
		if gs.Scaling && !spec.SurgeIgnoreScaling {
			return fmt.Errorf("group %q of job %q has a scaling policy (count %d, min %d, max %d): its count is managed by the autoscaler, which may undo the surge or be undone by it; add -surge-ignore-scaling to surge anyway, or drop -surge",
				g, js.ID, gs.Count, gs.Min, gs.Max)
		}
		if gs.Bounded && int64(gs.Count+spec.Surge) > gs.Max {
			return fmt.Errorf("group %q of job %q may run at most %d allocations (its scaling policy's max), so -surge %d from %d is refused by Nomad; lower -surge",
				g, js.ID, gs.Max, spec.Surge, gs.Count)
		}
	}
	return nil
}

// surgeBudget is how many more allocations of group may be out of service while its
// surge is up: the surge's own, so that a group already degraded when the restart starts
// (an allocation crash-looping) is not held back by the allocations the surge added, and
// the group still serves at least its original count less the budget.
func surgeBudget(r *restart.Record, group string) int {
	for _, s := range r.Surge {
		if s.Group == group && s.Phase == restart.SurgeUp {
			return max(s.To-s.From, 0)
		}
	}
	return 0
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
	groups := d.plannedGroups()
	sc, ok := d.e.cluster.(cluster.Scaler)
	if !ok {
		return false, d.surgeFailed(ctx, errors.New("-surge needs Nomad's job scale endpoint, which this cluster client does not offer"))
	}
	for _, g := range groups {
		if ok, err := d.surgeGroupUp(ctx, sc, g); err != nil || !ok {
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

// surgeGroupUp brings one group's surge up: intent, request (at most once), wait.
func (d *driver) surgeGroupUp(ctx context.Context, sc cluster.Scaler, group string) (bool, error) {
	var b backoff
	for {
		sg := d.surgeOf(group)
		if sg != nil && sg.Phase != restart.SurgeScalingUp {
			return true, nil
		}
		js, err := retry(ctx, func() (*cluster.JobScale, error) { return sc.JobScale(ctx, d.jobNS, d.jobID) })
		if err != nil {
			return false, fmt.Errorf("reading job %q for the surge: %w", d.jobID, err)
		}
		gs, found := js.Groups[group]
		if sg == nil {
			// Checked at planning too; checked again here for any caller and for what
			// changed since.
			if err := surgeRefusal(d.spec, js, []string{group}); err != nil {
				return false, d.surgeFailed(ctx, err)
			}
			g := restart.SurgeGroup{Group: group, From: gs.Count, To: gs.Count + d.spec.Surge,
				Phase: restart.SurgeScalingUp, JobModifyIndex: js.JobModifyIndex}
			if err := d.saveSurge(ctx, g, restart.EventSurge,
				fmt.Sprintf("Scaling group %q from %d to %d for the restart", group, g.From, g.To)); err != nil {
				return false, err
			}
			sg = &g
		}
		send := false
		switch {
		case !found || js.Stopped:
			return false, d.surgeLeft(ctx, *sg, fmt.Sprintf("job %q was stopped or lost group %q during the surge", d.jobID, group), true)
		case gs.Count == sg.To:
			// The request took effect (this driver's, or a former one's).
		case gs.Count == sg.From && sg.ScaledIndex == 0:
			if js.JobModifyIndex != sg.JobModifyIndex {
				// The job changed otherwise (not its count) since the intent: renew it.
				sg.JobModifyIndex = js.JobModifyIndex
				if err := d.saveSurge(ctx, *sg, "", ""); err != nil {
					return false, err
				}
			}
			send = true
		default:
			return false, d.surgeLeft(ctx, *sg, fmt.Sprintf("the count of group %q is %d, neither the %d it had nor the %d this restart asked for: someone else scaled it during the surge", group, gs.Count, sg.From, sg.To), true)
		}
		if send {
			res, err := sc.ScaleGroup(ctx, d.jobNS, d.jobID, group, sg.To, sg.JobModifyIndex, surgeMessage(d.id, true))
			switch {
			case err == nil:
				sg.ScaledIndex = res.JobModifyIndex
				if err := d.saveSurge(ctx, *sg, "", ""); err != nil {
					return false, err
				}
			case errors.Is(err, cluster.ErrPermissionDenied):
				return false, d.surgeFailed(ctx, fmt.Errorf("-surge: the token may not scale job %q (%v); it needs the scale-job capability (or submit-job) in namespace %q, or drop -surge", d.jobID, cluster.ErrPermissionDenied, nsName(d.jobNS)))
			case errors.Is(err, cluster.ErrScaleConflict):
				// The job changed since it was read: the facts decide, read again.
				if b.wait(ctx) != nil {
					return false, ctx.Err()
				}
				continue
			case errors.Is(err, cluster.ErrScaleBlocked):
				if err := d.awaitDeploymentEnd(ctx, sc, 0, d.surgeDeadline(group)); err != nil {
					return false, d.surgeFailed(ctx, fmt.Errorf("scaling group %q for the surge: %w", group, err))
				}
				continue
			case ctx.Err() != nil:
				return false, ctx.Err()
			case transient(err):
				d.log.Warn("scaling for the surge failed; checking the job and retrying", "group", group, "err", err)
				if b.wait(ctx) != nil {
					return false, ctx.Err()
				}
				continue
			default:
				return false, d.surgeFailed(ctx, fmt.Errorf("scaling group %q for the surge: %w", group, err))
			}
		}
		if sg.ScaledIndex == 0 {
			// A former driver's request took effect before it heard the answer: the job's
			// index is the scale's, unless the job changed since (then no deployment of
			// ours is looked for; the allocations' gate still holds).
			sg.ScaledIndex = js.JobModifyIndex
		}
		ok, err := d.awaitSurgeHealthy(ctx, sc, *sg, gs.Rolling)
		if err != nil || !ok {
			return ok, err
		}
		sg.Phase, sg.UpTime = restart.SurgeUp, d.e.now()
		return true, d.saveSurge(ctx, *sg, restart.EventSurge, fmt.Sprintf("Surge allocations of group %q are healthy", group))
	}
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
// Nomad refusing past the deadline) is recorded with the command that restores it, and
// the restart still ends. It returns an error only when ctx ends or the record cannot be
// written; the next driver then takes it up again.
func (d *driver) surgeDown(ctx context.Context) error {
	d.mu.Lock()
	if !d.rec.SurgeOpen() {
		d.mu.Unlock()
		return nil
	}
	var open []string
	for _, s := range d.rec.Surge {
		if !s.Phase.Done() {
			open = append(open, s.Group)
		}
	}
	d.mu.Unlock()
	sc, ok := d.e.cluster.(cluster.Scaler)
	if !ok {
		for _, g := range open {
			sg := d.surgeOf(g)
			if err := d.surgeLeft(ctx, *sg, "this cluster client cannot scale jobs, so the surge could not be scaled back", false); err != nil {
				return err
			}
		}
		return nil
	}
	for _, g := range open {
		if err := d.surgeGroupDown(ctx, sc, g); err != nil {
			return err
		}
	}
	return nil
}

func (d *driver) surgeGroupDown(ctx context.Context, sc cluster.Scaler, group string) error {
	giveUp := time.Now().Add(d.surgeDeadline(group))
	restore := func(sg restart.SurgeGroup, err error) error {
		return d.surgeLeft(ctx, sg, fmt.Sprintf("could not scale group %q back to %d (%v); restore it with `nomad job scale -namespace %s %s %s %d`",
			group, sg.From, err, nsName(d.jobNS), d.jobID, group, sg.From), false)
	}
	var b backoff
	for {
		sg := d.surgeOf(group)
		if sg == nil || sg.Phase.Done() {
			return nil
		}
		js, err := retry(ctx, func() (*cluster.JobScale, error) { return sc.JobScale(ctx, d.jobNS, d.jobID) })
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return restore(*sg, err)
		}
		gs, found := js.Groups[group]
		if !found || js.Stopped {
			return d.surgeLeft(ctx, *sg, fmt.Sprintf("job %q was stopped or lost group %q", d.jobID, group), false)
		}
		send := false
		switch sg.Phase {
		case restart.SurgeScalingUp, restart.SurgeUp:
			switch {
			case sg.Phase == restart.SurgeScalingUp && gs.Count == sg.From && sg.ScaledIndex == 0 && js.JobModifyIndex == sg.JobModifyIndex:
				// The scale-up never took effect: nothing to restore.
				sg.Phase, sg.DownTime = restart.SurgeDown, d.e.now()
				return d.saveSurge(ctx, *sg, restart.EventSurge, fmt.Sprintf("Group %q was not scaled; its count stays %d", group, sg.From))
			case gs.Count == sg.To:
				sg.UpIndex = sg.ScaledIndex
				sg.Phase, sg.JobModifyIndex, sg.ScaledIndex = restart.SurgeScalingDown, js.JobModifyIndex, 0
				if err := d.saveSurge(ctx, *sg, restart.EventSurge, fmt.Sprintf("Scaling group %q back to %d", group, sg.From)); err != nil {
					return err
				}
				send = true
			case gs.Count == sg.From:
				sg.Phase, sg.DownTime = restart.SurgeDown, d.e.now()
				sg.Note = fmt.Sprintf("someone else already scaled group %q back to %d", group, sg.From)
				return d.saveSurge(ctx, *sg, restart.EventSurge, fmt.Sprintf("Group %q is already back to %d", group, sg.From))
			default:
				// Never scale down a group someone else scaled meanwhile (below our target
				// or above it): its count is theirs now.
				return d.surgeLeft(ctx, *sg, fmt.Sprintf("the count of group %q is %d, not the %d this restart set: someone else scaled it", group, gs.Count, sg.To), false)
			}
		case restart.SurgeScalingDown:
			switch {
			case gs.Count == sg.From:
				sg.Phase, sg.DownTime = restart.SurgeDown, d.e.now()
				if err := d.saveSurge(ctx, *sg, restart.EventSurge, fmt.Sprintf("Group %q is back to %d", group, sg.From)); err != nil {
					return err
				}
				return d.awaitSurgeGone(ctx, *sg)
			case gs.Count == sg.To && sg.ScaledIndex == 0:
				if js.JobModifyIndex != sg.JobModifyIndex {
					sg.JobModifyIndex = js.JobModifyIndex
					if err := d.saveSurge(ctx, *sg, "", ""); err != nil {
						return err
					}
				}
				send = true
			default:
				return d.surgeLeft(ctx, *sg, fmt.Sprintf("the count of group %q is %d, not the %d this restart set: someone else scaled it", group, gs.Count, sg.To), false)
			}
		}
		if !send {
			continue
		}
		res, err := sc.ScaleGroup(ctx, d.jobNS, d.jobID, group, sg.From, sg.JobModifyIndex, surgeMessage(d.id, false))
		switch {
		case err == nil:
			sg.ScaledIndex = res.JobModifyIndex
			if err := d.saveSurge(ctx, *sg, "", ""); err != nil {
				return err
			}
			continue // the count decides
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, cluster.ErrScaleConflict):
			if b.wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		case errors.Is(err, cluster.ErrScaleBlocked):
			// Nomad refuses to scale while a deployment runs. The surge's own (its new
			// allocations never got healthy, and the restart is ending) would run until the
			// job's own deadlines: fail it, so that the count comes back now. Another's
			// is waited for.
			if failed, ferr := d.failSurgeDeployment(ctx, sc, *sg); ferr != nil {
				d.log.Warn("failing the surge's own deployment", "group", group, "err", ferr)
			} else if failed {
				continue
			}
			if werr := d.awaitDeploymentEnd(ctx, sc, 0, time.Until(giveUp)); werr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return restore(*sg, err)
			}
			continue
		case transient(err) && time.Now().Before(giveUp):
			d.log.Warn("scaling back after the surge failed; checking the job and retrying", "group", group, "err", err)
			if b.wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		return restore(*sg, err)
	}
}

// failSurgeDeployment fails the job's active deployment when it is the one the surge's
// scale-up made (its JobSpecModifyIndex is the scale-up's), and reports whether it did.
func (d *driver) failSurgeDeployment(ctx context.Context, sc cluster.Scaler, sg restart.SurgeGroup) (bool, error) {
	if sg.UpIndex == 0 {
		return false, nil // the scale-up's index is unknown: never fail another's
	}
	dep, _, err := sc.LatestDeployment(ctx, d.jobNS, d.jobID, 0)
	if err != nil || dep == nil || !dep.Active() || dep.JobSpecModifyIndex != sg.UpIndex {
		return false, err
	}
	if err := sc.FailDeployment(ctx, d.jobNS, dep.ID); err != nil {
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
func (d *driver) awaitSurgeHealthy(ctx context.Context, sc cluster.Scaler, g restart.SurgeGroup, rolling bool) (bool, error) {
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
	if err := d.awaitDeploymentEnd(ctx, sc, g.ScaledIndex, deadline); err != nil {
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
		if _, _, err := d.gateDeps(ctx); err != nil {
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
// it when it processes the scale's evaluation.
func (d *driver) awaitDeploymentEnd(ctx context.Context, sc cluster.Scaler, sinceIndex uint64, within time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, max(within, time.Millisecond))
	defer cancel()
	var index uint64
	var b backoff
	for {
		dep, next, err := sc.LatestDeployment(wctx, d.jobNS, d.jobID, index)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return fmt.Errorf("the deployment of job %q did not end within %s", d.jobID, within)
		case err != nil && transient(err):
			if b.wait(wctx) != nil {
				return fmt.Errorf("the deployment of job %q did not end within %s: %w", d.jobID, within, err)
			}
			continue
		case err != nil:
			return err
		}
		b = backoff{}
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
	cfg := health.Config{Mode: health.ModeRunning, Tasks: tasks, MinHealthy: minH}
	var sources health.Sources
	if d.spec.Health == restart.HealthChecks {
		job, src, err := d.gateDeps(ctx)
		if err != nil {
			return &allocFailure{err}
		}
		cfg.Mode, cfg.Tasks, cfg.Checks, sources = health.ModeChecks, longRunning(job, a.Group, tasks), health.AllocChecks(job, a), src
	}
	cfg.Since = tasksStarted(a, cfg.Tasks)
	d.e.observeTimes(a)
	g := health.NewGate(cfg)
	g.ObserveAlloc(a)
	now := d.e.nomadNow()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcErr := make(chan error, 1)
	if cfg.Mode == health.ModeChecks {
		go func() { srcErr <- sources.Watch(wctx, g, a.ID) }()
	}
	allocs := d.followAlloc(wctx, a.ID, a.ModifyIndex)
	tick := d.gateTicker()
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-srcErr:
			srcErr = nil
			if err != nil && ctx.Err() == nil {
				return &allocFailure{err}
			}
		case r := <-allocs:
			if r.err != nil {
				return &allocFailure{fmt.Errorf("following surge allocation %q: %w", a.ID, r.err)}
			}
			d.e.observeTimes(r.a)
			g.ObserveAlloc(r.a)
		case <-tick.C:
		}
		switch v := g.Evaluate(now()); v.State {
		case health.Healthy:
			return nil
		case health.Failed:
			return &allocFailure{errors.New(v.Reason)}
		}
	}
}
