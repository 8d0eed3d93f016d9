package restart

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// The rules below decide each step of a -surge from Nomad's facts about the job and the
// group's surge state as recorded, without I/O: the engine reads the facts, asks, and
// applies the answer (persisting the state before any request it sends), then reads again.
// They hold the surge's exactly-once rule: a scale request is sent only when the group's
// count is still the one the recorded intent started from and no answer to an earlier
// request was recorded; the target count means a request took effect; any other count is
// someone else's, and the restart leaves it as it is.

// JobScale is what a surge needs of a job's current version, as package cluster reads it.
type JobScale struct {
	ID             string
	Type           string
	Stopped        bool
	Version        uint64
	JobModifyIndex uint64
	Groups         map[string]GroupScale
	// MaxCount is the most allocations Nomad lets the job have in all, its groups' counts
	// summed (its servers' job_max_count); 0 when not known, or not limited.
	MaxCount int
}

// GroupScale is one group's count and what manages it.
type GroupScale struct {
	Count int
	// Scaling is true when an enabled scaling policy (an autoscaler) manages the count;
	// Bounded when the group has a scaling block, enabled or not, whose Min and Max Nomad
	// holds a scale within.
	Scaling, Bounded bool
	Min, Max         int64
	// Rolling is true when the group has an update strategy: Nomad then makes a deployment
	// for the scaled version.
	Rolling bool
}

// SurgeRefusal says why the job's groups cannot surge, nil when they can.
func SurgeRefusal(spec Spec, js JobScale, groups []string) error {
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
	return surgePastMaxCount(spec.Surge, js, len(groups))
}

// surgePastMaxCount refuses a surge that would take the job past the allocations Nomad
// allows it in all (js.MaxCount): Nomad checks each scale's total, the job's groups'
// counts summed, so the last of the groups' scale-ups, with every earlier surge in it, is
// the one that counts.
func surgePastMaxCount(surge int, js JobScale, groups int) error {
	if js.MaxCount <= 0 || groups == 0 {
		return nil
	}
	total := 0
	for _, g := range js.Groups {
		total += g.Count
	}
	room := js.MaxCount - total
	if room >= 0 && surge <= room/groups {
		return nil
	}
	// Worded without overflow: -surge may be huge (a typo).
	to := "more than " + strconv.Itoa(js.MaxCount)
	if surge <= (math.MaxInt-total)/groups {
		to = strconv.Itoa(total + surge*groups)
	}
	return fmt.Errorf("-surge %d would take job %q to %s allocations in all, past the %d its Nomad servers allow (job_max_count); %s",
		surge, js.ID, to, js.MaxCount, lowerSurge(room, groups))
}

// lowerSurge is the fix of a surge past job_max_count: the largest -surge that fits in room
// allocations for groups groups, or "drop -surge" when none does.
func lowerSurge(room, groups int) string {
	if fit := room / max(groups, 1); fit >= 1 {
		return fmt.Sprintf("lower -surge to at most %d", fit)
	}
	return "drop -surge (the job has no room left under it)"
}

// SurgePastMaxCount words Nomad's refusal of a surge's scale-up past job_max_count, learnt
// only when the request was sent (the limit could not be read at planning): Nomad's text
// (why) and the fix, room being the allocations the job had left under the limit before
// the surge, for groups groups.
func SurgePastMaxCount(group, why string, room, groups int) string {
	return fmt.Sprintf("Nomad refused to scale group %q for the surge: %s; %s, or raise the servers' job_max_count",
		group, why, lowerSurge(room, groups))
}

// SurgeBudget is how many more allocations of group may be out of service while its surge
// is up: the surge's own, so that a group already degraded when the restart starts (an
// allocation crash-looping) is not held back by the allocations the surge added, and the
// group still serves at least its original count less the budget.
func SurgeBudget(r *Record, group string) int {
	for _, s := range r.Surge {
		if s.Group == group && s.Phase == SurgeUp {
			return max(s.To-s.From, 0)
		}
	}
	return 0
}

// SurgeAction is what the engine does next for one group's surge.
type SurgeAction int

const (
	// SurgeRefuse: the group cannot surge (Why); the restart fails before any request.
	SurgeRefuse SurgeAction = iota + 1
	// SurgeSend: send the scale request for the step's Count, with the step's
	// Group.JobModifyIndex as Nomad's check-and-set.
	SurgeSend
	// SurgeAwaitHealthy: the scale-up took effect; wait for the surge allocations.
	SurgeAwaitHealthy
	// SurgeAwaitGone: the scale-down took effect; wait for the surge allocations to stop.
	SurgeAwaitGone
	// SurgeLeave: the count is not this restart's any more (Why): record the group left as
	// it is (while scaling up, the restart then fails: its surge cannot be had).
	SurgeLeave
	// SurgeDone: nothing more to do for the group.
	SurgeDone
)

// SurgeStep is a decision on one group's surge.
type SurgeStep struct {
	Action SurgeAction
	// Count is the count SurgeSend asks for.
	Count int
	// Group is the group's surge state once the step is taken.
	Group SurgeGroup
	// Save says to persist Group before acting (with Event as a surge event, when not
	// empty): the intent a request needs before it is sent, or what the facts showed.
	Save  bool
	Event string
	// Why is the reason of SurgeRefuse and SurgeLeave.
	Why string
}

// DecideSurgeUp decides the next step of group's scale-up from its recorded surge state
// (nil before its intent) and the job's facts. The first step records the intent (From the
// count now, To the count plus the surge, the JobModifyIndex read) and sends the request;
// a later one sends it again only if the count is still From and no answer was recorded,
// renewing the intent's JobModifyIndex when the job changed otherwise; the count at To means
// a request took effect. A group whose scale-up is over (up, or left) is done.
func DecideSurgeUp(spec Spec, recorded *SurgeGroup, group string, js JobScale) SurgeStep {
	if recorded != nil && recorded.Phase != SurgeScalingUp {
		return SurgeStep{Action: SurgeDone, Group: *recorded}
	}
	gs, found := js.Groups[group]
	var step SurgeStep
	if recorded == nil {
		// Checked at planning too; checked again here for any caller and for what changed
		// since.
		if err := SurgeRefusal(spec, js, []string{group}); err != nil {
			return SurgeStep{Action: SurgeRefuse, Why: err.Error()}
		}
		g := SurgeGroup{Group: group, From: gs.Count, To: gs.Count + spec.Surge, Phase: SurgeScalingUp, JobModifyIndex: js.JobModifyIndex}
		step = SurgeStep{Group: g, Save: true, Event: fmt.Sprintf("Scaling group %q from %d to %d for the restart", group, g.From, g.To)}
	} else {
		step = SurgeStep{Group: *recorded}
	}
	g := &step.Group
	switch {
	case !found || js.Stopped:
		step.Action, step.Why = SurgeLeave, fmt.Sprintf("job %q was stopped or lost group %q during the surge", js.ID, group)
	case gs.Count == g.To:
		// The request took effect (this driver's, or a former one's). With no answer
		// recorded, a former driver's took effect before it heard it: the job's index is the
		// scale's, unless the job changed since (then no deployment of ours is looked for;
		// the allocations' gate still holds).
		step.Action = SurgeAwaitHealthy
		if g.ScaledIndex == 0 {
			g.ScaledIndex = js.JobModifyIndex
		}
	case gs.Count == g.From && g.ScaledIndex == 0:
		if js.JobModifyIndex != g.JobModifyIndex {
			// The job changed otherwise (not its count) since the intent: renew it.
			g.JobModifyIndex, step.Save = js.JobModifyIndex, true
		}
		step.Action, step.Count = SurgeSend, g.To
	default:
		step.Action, step.Why = SurgeLeave, fmt.Sprintf("the count of group %q is %d, neither the %d it had nor the %d this restart asked for: someone else scaled it during the surge", group, gs.Count, g.From, g.To)
	}
	return step
}

// DecideSurgeDown decides the next step of a group's scale-down, at the end of the
// restart, from its recorded surge state and the job's facts. The group is scaled back
// exactly when its count is the one this restart set; a count someone else changed is left
// as it is (never scaled down under another's change); a scale-up that never took effect
// needs nothing. now is recorded as the DownTime of a group found back at its count.
func DecideSurgeDown(recorded SurgeGroup, js JobScale, now time.Time) SurgeStep {
	step := SurgeStep{Group: recorded}
	g := &step.Group
	if g.Phase.Done() {
		step.Action = SurgeDone
		return step
	}
	gs, found := js.Groups[g.Group]
	if !found || js.Stopped {
		step.Action, step.Why = SurgeLeave, fmt.Sprintf("job %q was stopped or lost group %q", js.ID, g.Group)
		return step
	}
	notOurs := fmt.Sprintf("the count of group %q is %d, not the %d this restart set: someone else scaled it", g.Group, gs.Count, g.To)
	down := func(event, note string) SurgeStep {
		g.Phase, g.DownTime, g.Note = SurgeDown, now, note
		step.Save, step.Event = true, event
		return step
	}
	if g.Phase == SurgeScalingDown {
		switch {
		case gs.Count == g.From:
			step = down(fmt.Sprintf("Group %q is back to %d", g.Group, g.From), g.Note)
			step.Action = SurgeAwaitGone
		case gs.Count == g.To && g.ScaledIndex == 0:
			if js.JobModifyIndex != g.JobModifyIndex {
				g.JobModifyIndex, step.Save = js.JobModifyIndex, true
			}
			step.Action, step.Count = SurgeSend, g.From
		default:
			step.Action, step.Why = SurgeLeave, notOurs
		}
		return step
	}
	// Scaling up, or up.
	switch {
	case g.Phase == SurgeScalingUp && gs.Count == g.From && g.ScaledIndex == 0 && js.JobModifyIndex == g.JobModifyIndex:
		// The scale-up never took effect: nothing to restore.
		step = down(fmt.Sprintf("Group %q was not scaled; its count stays %d", g.Group, g.From), g.Note)
		step.Action = SurgeDone
	case gs.Count == g.To:
		g.UpIndex = g.ScaledIndex
		g.Phase, g.JobModifyIndex, g.ScaledIndex = SurgeScalingDown, js.JobModifyIndex, 0
		step.Action, step.Count = SurgeSend, g.From
		step.Save, step.Event = true, fmt.Sprintf("Scaling group %q back to %d", g.Group, g.From)
	case gs.Count == g.From:
		step = down(fmt.Sprintf("Group %q is already back to %d", g.Group, g.From),
			fmt.Sprintf("someone else already scaled group %q back to %d", g.Group, g.From))
		step.Action = SurgeDone
	default:
		step.Action, step.Why = SurgeLeave, notOurs
	}
	return step
}

// ScaleAnswer is Nomad's answer to a scale request, as the surge tells them apart.
type ScaleAnswer int

const (
	// ScaleAccepted: Nomad made the new job version.
	ScaleAccepted ScaleAnswer = iota + 1
	// ScaleConflict: the job changed since the JobModifyIndex sent (check-and-set).
	ScaleConflict
	// ScaleBlocked: a deployment of the job is active, and Nomad refuses to scale meanwhile.
	ScaleBlocked
	// ScaleDenied: the token may not scale the job.
	ScaleDenied
	// ScaleUnavailable: Nomad, or the way to it, failed in a way that passes (transient).
	ScaleUnavailable
	// ScaleRefused: any other answer.
	ScaleRefused
)

// ScaleNext is what the surge does after a scale request's answer.
type ScaleNext int

const (
	// ScaleRead: read the job again, and let its facts decide (DecideSurgeUp or
	// DecideSurgeDown): whether the request took effect, or is to be sent again.
	ScaleRead ScaleNext = iota + 1
	// ScalePauseRead: ScaleRead after a pause (backoff): Nomad or the job is busy.
	ScalePauseRead
	// ScaleAwaitDeployment: wait for the job's active deployment to end, then read again.
	// While scaling down, first fail it if it is the surge's own (SurgeGroup.OwnsDeployment).
	ScaleAwaitDeployment
	// ScaleProceed: the request took effect: record its answer's index (ScaledIndex),
	// then, scaling up, wait for the surge allocations; scaling down, read again.
	ScaleProceed
	// ScaleGiveUp: the request cannot succeed. Scaling up, the restart fails; scaling down,
	// the group is left as it is with the command that restores its count.
	ScaleGiveUp
)

// AfterScaleUp decides what follows a scale-up request's answer: a conflict or a passing
// failure is read again (the facts say whether it took effect), a running deployment is
// waited for, a refusal fails the restart.
func AfterScaleUp(a ScaleAnswer) ScaleNext {
	switch a {
	case ScaleAccepted:
		return ScaleProceed
	case ScaleConflict, ScaleUnavailable:
		return ScalePauseRead
	case ScaleBlocked:
		return ScaleAwaitDeployment
	}
	return ScaleGiveUp
}

// AfterScaleDown decides what follows a scale-down request's answer. The restart is
// ending, so a passing failure is retried only while the group's deadline lasts
// (timeLeft); a refusal leaves the group with the command that restores it.
func AfterScaleDown(a ScaleAnswer, timeLeft bool) ScaleNext {
	switch {
	case a == ScaleAccepted:
		return ScaleProceed
	case a == ScaleConflict, a == ScaleUnavailable && timeLeft:
		return ScalePauseRead
	case a == ScaleBlocked:
		return ScaleAwaitDeployment
	}
	return ScaleGiveUp
}

// OwnsDeployment reports whether an active deployment made for the job version with
// jobSpecModifyIndex is the one the group's scale-up made: a scale-down Nomad refuses while
// it runs (its new allocations never got healthy, and the restart is ending) may fail it, so
// that the count comes back now rather than at the job's own deadlines. Another's deployment
// is waited for. With the scale-up's index unknown, no deployment is the surge's.
func (g SurgeGroup) OwnsDeployment(active bool, jobSpecModifyIndex uint64) bool {
	return g.UpIndex != 0 && active && jobSpecModifyIndex == g.UpIndex
}
