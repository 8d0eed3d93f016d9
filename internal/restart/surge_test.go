package restart

import (
	"strings"
	"testing"
	"time"
)

// TestSurgeRefusal covers the refusals checked before anything changes.
func TestSurgeRefusal(t *testing.T) {
	job := func(typ string, g GroupScale) JobScale {
		return JobScale{ID: "web", Type: typ, Groups: map[string]GroupScale{"web": g}}
	}
	for _, tc := range []struct {
		name string
		spec Spec
		js   JobScale
		want string
	}{
		{"service", Spec{Surge: 1}, job("service", GroupScale{Count: 1}), ""},
		{"batch", Spec{Surge: 1}, job("batch", GroupScale{Count: 1}), "service jobs only"},
		{"system", Spec{Surge: 1}, job("system", GroupScale{Count: 1}), "service jobs only"},
		{"scaling policy", Spec{Surge: 1}, job("service", GroupScale{Count: 1, Scaling: true, Bounded: true, Min: 1, Max: 5}), "-surge-ignore-scaling"},
		{"scaling policy ignored", Spec{Surge: 1, SurgeIgnoreScaling: true}, job("service", GroupScale{Count: 1, Scaling: true, Bounded: true, Min: 1, Max: 5}), ""},
		{"past the policy's max", Spec{Surge: 2, SurgeIgnoreScaling: true}, job("service", GroupScale{Count: 4, Scaling: true, Bounded: true, Min: 1, Max: 5}), "lower -surge"},
		{"past a disabled policy's max", Spec{Surge: 2}, job("service", GroupScale{Count: 4, Bounded: true, Min: 1, Max: 5}), "lower -surge"},
		{"group gone", Spec{Surge: 1}, JobScale{ID: "web", Type: "service"}, "no longer in job"},
		{"stopped", Spec{Surge: 1}, JobScale{ID: "web", Type: "service", Stopped: true}, "stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SurgeRefusal(tc.spec, tc.js, []string{"web"})
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

// TestSurgePastMaxCount: Nomad checks a scale against job_max_count over the job's groups'
// counts summed, the groups surged one after another: the plan refuses a surge whose last
// scale-up would pass it, with the largest -surge that fits; an unknown limit (0) refuses
// nothing.
func TestSurgePastMaxCount(t *testing.T) {
	two := JobScale{ID: "web", Type: "service", Groups: map[string]GroupScale{"web": {Count: 2}, "api": {Count: 3}, "other": {Count: 5}}}
	for _, tc := range []struct {
		name   string
		max    int
		surge  int
		groups []string
		want   string
	}{
		{"unknown limit", 0, 100000000, []string{"web"}, ""},
		{"fits exactly", 11, 1, []string{"web"}, ""},
		{"one past", 11, 2, []string{"web"}, "-surge 2 would take job \"web\" to 12 allocations in all, past the 11 its Nomad servers allow (job_max_count); lower -surge to at most 1"},
		{"two groups surged, to the limit", 14, 2, []string{"api", "web"}, ""},
		{"two groups, one past", 14, 3, []string{"api", "web"}, "to 16 allocations in all, past the 14 its Nomad servers allow (job_max_count); lower -surge to at most 2"},
		{"no room left", 10, 1, []string{"web"}, "drop -surge"},
		{"huge surge does not wrap", 50000, 1 << 62, []string{"api", "web"}, "to more than 50000 allocations in all, past the 50000 its Nomad servers allow (job_max_count); lower -surge to at most 24995"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := two
			js.MaxCount = tc.max
			err := SurgeRefusal(Spec{Surge: tc.surge}, js, tc.groups)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
	if got := SurgePastMaxCount("web", "total count was greater than configured job_max_count: 6 > 4", 2, 1); got != `Nomad refused to scale group "web" for the surge: total count was greater than configured job_max_count: 6 > 4; lower -surge to at most 2, or raise the servers' job_max_count` {
		t.Errorf("SurgePastMaxCount: %s", got)
	}
}

// TestSurgeBudget: while a group's surge is up its budget gains the surge's allocations: a
// group of 2 with one allocation crash-looping, surged to 3, may restart its healthy one
// (2 serve before, 1 during), which without the surge's gain would wait.
func TestSurgeBudget(t *testing.T) {
	serving := func(id string, create uint64) *Alloc {
		return &Alloc{ID: id, Group: "web", CreateIndex: create, DesiredStatus: "run", ClientStatus: "running",
			Tasks: map[string]TaskState{"main": {State: TaskRunning}}}
	}
	looping := serving("looping", 2)
	looping.Tasks = map[string]TaskState{"main": {State: TaskPending}}
	allocs := []*Alloc{serving("healthy", 1), looping, serving("surge", 10)}
	job := &Job{ID: "web", Type: "service", Groups: []Group{{Name: "web", Count: 3}}}
	for _, tc := range []struct {
		phase SurgePhase
		fits  bool
	}{
		{SurgeUp, true},
		{SurgeScalingUp, false},
		{SurgeDown, false},
	} {
		r := &Record{Allocs: []AllocProgress{{ID: "healthy", Group: "web", Batch: 1}, {ID: "looping", Group: "web", Batch: 2}},
			Batches: 2, Surge: []SurgeGroup{{Group: "web", From: 2, To: 3, Phase: tc.phase}}}
		bs := Budgets(r, Spec{}, job, 1, allocs, nil)
		if len(bs) != 1 || bs[0].Fits() != tc.fits {
			t.Errorf("surge %s: budget %+v fits %v, want %v", tc.phase, bs, bs[0].Fits(), tc.fits)
		}
	}
}

// scaleOf is a service job "web" whose group "web" has count, at JobModifyIndex jmi.
func scaleOf(count int, jmi uint64) JobScale {
	return JobScale{ID: "web", Type: "service", JobModifyIndex: jmi, Groups: map[string]GroupScale{"web": {Count: count}}}
}

// TestDecideSurgeUp: the scale-up is sent exactly when the count is still the intent's
// and no answer was recorded; the target count means it took effect; any other count, or
// a job stopped or without the group, is someone else's.
func TestDecideSurgeUp(t *testing.T) {
	intent := func(scaled uint64) *SurgeGroup {
		return &SurgeGroup{Group: "web", From: 1, To: 2, Phase: SurgeScalingUp, JobModifyIndex: 100, ScaledIndex: scaled}
	}
	stopped := scaleOf(1, 100)
	stopped.Stopped = true
	for _, tc := range []struct {
		name     string
		recorded *SurgeGroup
		js       JobScale
		action   SurgeAction
		save     bool
		event    string // in the saved event
		jmi      uint64 // the JobModifyIndex the step holds
		scaled   uint64 // the ScaledIndex the step holds
		why      string
	}{
		{name: "first turn: the intent is recorded, then sent", js: scaleOf(1, 100),
			action: SurgeSend, save: true, event: `Scaling group "web" from 1 to 2 for the restart`, jmi: 100},
		{name: "first turn on a batch job: refused before any intent", js: JobScale{ID: "web", Type: "batch", Groups: map[string]GroupScale{"web": {Count: 1}}},
			action: SurgeRefuse, why: "service jobs only"},
		{name: "intent recorded, request lost: sent again, once", recorded: intent(0), js: scaleOf(1, 100),
			action: SurgeSend, jmi: 100},
		{name: "intent recorded, the job changed otherwise: renewed and sent", recorded: intent(0), js: scaleOf(1, 120),
			action: SurgeSend, save: true, jmi: 120},
		{name: "request took effect, answer recorded: wait for health", recorded: intent(101), js: scaleOf(2, 101),
			action: SurgeAwaitHealthy, jmi: 100, scaled: 101},
		{name: "a former driver's request took effect unheard: the job's index is the scale's", recorded: intent(0), js: scaleOf(2, 101),
			action: SurgeAwaitHealthy, jmi: 100, scaled: 101},
		{name: "operator scaled during the surge", recorded: intent(0), js: scaleOf(3, 130),
			action: SurgeLeave, jmi: 100, why: "someone else scaled it during the surge"},
		{name: "back at the old count after our answer: someone else's", recorded: intent(101), js: scaleOf(1, 140),
			action: SurgeLeave, jmi: 100, scaled: 101, why: "neither the 1 it had nor the 2"},
		{name: "job stopped during the surge", recorded: intent(0), js: stopped,
			action: SurgeLeave, jmi: 100, why: "was stopped or lost group"},
		{name: "group gone during the surge", recorded: intent(0), js: JobScale{ID: "web", Type: "service", JobModifyIndex: 150},
			action: SurgeLeave, jmi: 100, why: "was stopped or lost group"},
		{name: "surge already up", recorded: &SurgeGroup{Group: "web", From: 1, To: 2, Phase: SurgeUp, JobModifyIndex: 100, ScaledIndex: 101}, js: scaleOf(2, 101),
			action: SurgeDone, jmi: 100, scaled: 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := DecideSurgeUp(Spec{Surge: 1}, tc.recorded, "web", tc.js)
			if step.Action != tc.action || step.Save != tc.save || !strings.Contains(step.Why, tc.why) || (tc.why == "") != (step.Why == "") {
				t.Fatalf("step %+v, want action %d save %v why %q", step, tc.action, tc.save, tc.why)
			}
			if step.Event != tc.event {
				t.Errorf("event %q, want %q", step.Event, tc.event)
			}
			if tc.action == SurgeRefuse {
				return
			}
			g := step.Group
			if g.Group != "web" || g.From != 1 || g.To != 2 || g.JobModifyIndex != tc.jmi || g.ScaledIndex != tc.scaled {
				t.Errorf("group %+v, want 1 to 2 at JobModifyIndex %d, ScaledIndex %d", g, tc.jmi, tc.scaled)
			}
			if tc.action == SurgeSend && step.Count != 2 {
				t.Errorf("sends count %d, want 2", step.Count)
			}
		})
	}
}

// TestDecideSurgeDown: at the end of a restart the group is scaled back exactly when the
// facts say the count is this restart's, once, and left alone otherwise.
func TestDecideSurgeDown(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	group := func(phase SurgePhase, jmi, scaled, up uint64) SurgeGroup {
		return SurgeGroup{Group: "web", From: 1, To: 2, Phase: phase, JobModifyIndex: jmi, ScaledIndex: scaled, UpIndex: up}
	}
	for _, tc := range []struct {
		name     string
		recorded SurgeGroup
		js       JobScale
		action   SurgeAction
		phase    SurgePhase // of the step's group
		event    string     // saved with the step ("" and save false: nothing saved)
		save     bool
		note     string
		jmi      uint64
		up       uint64
		why      string
	}{
		{name: "up: the scale-down intent is recorded, then sent", recorded: group(SurgeUp, 100, 101, 0), js: scaleOf(2, 105),
			action: SurgeSend, phase: SurgeScalingDown, save: true, event: `Scaling group "web" back to 1`, jmi: 105, up: 101},
		{name: "scale-down intent, request lost: sent again once", recorded: group(SurgeScalingDown, 105, 0, 101), js: scaleOf(2, 105),
			action: SurgeSend, phase: SurgeScalingDown, jmi: 105, up: 101},
		{name: "scale-down intent, the job changed otherwise: renewed and sent", recorded: group(SurgeScalingDown, 105, 0, 101), js: scaleOf(2, 110),
			action: SurgeSend, phase: SurgeScalingDown, save: true, jmi: 110, up: 101},
		{name: "scale-down took effect: wait for the surge to go", recorded: group(SurgeScalingDown, 105, 106, 101), js: scaleOf(1, 106),
			action: SurgeAwaitGone, phase: SurgeDown, save: true, event: `Group "web" is back to 1`, jmi: 105, up: 101},
		{name: "scale-down took effect before the crash", recorded: group(SurgeScalingDown, 105, 0, 101), js: scaleOf(1, 106),
			action: SurgeAwaitGone, phase: SurgeDown, save: true, event: `Group "web" is back to 1`, jmi: 105, up: 101},
		{name: "scale-up never took effect", recorded: group(SurgeScalingUp, 100, 0, 0), js: scaleOf(1, 100),
			action: SurgeDone, phase: SurgeDown, save: true, event: `Group "web" was not scaled; its count stays 1`, jmi: 100},
		{name: "scale-up took effect unheard: scaled back", recorded: group(SurgeScalingUp, 100, 0, 0), js: scaleOf(2, 101),
			action: SurgeSend, phase: SurgeScalingDown, save: true, event: `Scaling group "web" back to 1`, jmi: 101},
		{name: "scale-up intent, the job changed since, count unchanged: someone else scaled back", recorded: group(SurgeScalingUp, 100, 0, 0), js: scaleOf(1, 120),
			action: SurgeDone, phase: SurgeDown, save: true, event: `Group "web" is already back to 1`, note: "someone else already scaled", jmi: 100},
		{name: "operator scaled above", recorded: group(SurgeUp, 100, 101, 0), js: scaleOf(3, 130),
			action: SurgeLeave, phase: SurgeUp, jmi: 100, why: "someone else scaled it"},
		{name: "operator scaled below the target", recorded: group(SurgeUp, 100, 101, 0), js: scaleOf(0, 130),
			action: SurgeLeave, phase: SurgeUp, jmi: 100, why: "the count of group \"web\" is 0, not the 2"},
		{name: "operator scaled back already", recorded: group(SurgeUp, 100, 101, 0), js: scaleOf(1, 130),
			action: SurgeDone, phase: SurgeDown, save: true, event: `Group "web" is already back to 1`, note: "someone else already scaled", jmi: 100},
		{name: "scaling down, operator scaled elsewhere", recorded: group(SurgeScalingDown, 105, 0, 101), js: scaleOf(4, 130),
			action: SurgeLeave, phase: SurgeScalingDown, jmi: 105, up: 101, why: "someone else scaled it"},
		{name: "job stopped", recorded: group(SurgeUp, 100, 101, 0), js: JobScale{ID: "web", Type: "service", Stopped: true, Groups: map[string]GroupScale{"web": {Count: 2}}},
			action: SurgeLeave, phase: SurgeUp, jmi: 100, why: `job "web" was stopped or lost group "web"`},
		{name: "already down", recorded: group(SurgeDown, 100, 101, 0), js: scaleOf(1, 130),
			action: SurgeDone, phase: SurgeDown, jmi: 100},
		{name: "already left", recorded: group(SurgeLeft, 100, 101, 0), js: scaleOf(3, 130),
			action: SurgeDone, phase: SurgeLeft, jmi: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := DecideSurgeDown(tc.recorded, tc.js, now)
			if step.Action != tc.action || step.Save != tc.save || step.Event != tc.event || (tc.why == "") != (step.Why == "") || !strings.Contains(step.Why, tc.why) {
				t.Fatalf("step %+v, want action %d save %v event %q why %q", step, tc.action, tc.save, tc.event, tc.why)
			}
			g := step.Group
			if g.Phase != tc.phase || !strings.Contains(g.Note, tc.note) || (tc.note == "") != (g.Note == "") || g.JobModifyIndex != tc.jmi || g.UpIndex != tc.up {
				t.Errorf("group %+v, want phase %s note %q JobModifyIndex %d UpIndex %d", g, tc.phase, tc.note, tc.jmi, tc.up)
			}
			if tc.action == SurgeSend && (step.Count != 1 || g.ScaledIndex != 0) {
				t.Errorf("sends count %d with ScaledIndex %d, want 1 with no answer recorded", step.Count, g.ScaledIndex)
			}
			if g.Phase == SurgeDown && tc.recorded.Phase != SurgeDown && !g.DownTime.Equal(now) {
				t.Errorf("down time %v, want %v", g.DownTime, now)
			}
		})
	}
}

// TestAfterScale: what follows each answer to a scale request, up and down.
func TestAfterScale(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   ScaleAnswer
		timeLeft bool
		up, down ScaleNext
	}{
		{"accepted: record the answer", ScaleAccepted, true, ScaleProceed, ScaleProceed},
		{"conflict: the job changed, its facts decide", ScaleConflict, true, ScalePauseRead, ScalePauseRead},
		{"conflict past the deadline: the facts still decide", ScaleConflict, false, ScalePauseRead, ScalePauseRead},
		{"blocked by a deployment: wait for it (down: fail the surge's own)", ScaleBlocked, true, ScaleAwaitDeployment, ScaleAwaitDeployment},
		{"Nomad unavailable: read again", ScaleUnavailable, true, ScalePauseRead, ScalePauseRead},
		{"Nomad unavailable past the deadline: down gives up", ScaleUnavailable, false, ScalePauseRead, ScaleGiveUp},
		{"permission denied", ScaleDenied, true, ScaleGiveUp, ScaleGiveUp},
		{"refused otherwise", ScaleRefused, true, ScaleGiveUp, ScaleGiveUp},
	} {
		if got := AfterScaleUp(tc.answer); got != tc.up {
			t.Errorf("%s: AfterScaleUp = %d, want %d", tc.name, got, tc.up)
		}
		if got := AfterScaleDown(tc.answer, tc.timeLeft); got != tc.down {
			t.Errorf("%s: AfterScaleDown = %d, want %d", tc.name, got, tc.down)
		}
	}
}

// TestOwnsDeployment: a scale-down fails only the deployment the surge's scale-up made.
func TestOwnsDeployment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		up     uint64
		active bool
		index  uint64
		want   bool
	}{
		{"the scale-up's, running", 101, true, 101, true},
		{"the scale-up's, ended", 101, false, 101, false},
		{"another version's", 101, true, 130, false},
		{"the scale-up's index unknown", 0, true, 0, false},
	} {
		g := SurgeGroup{Group: "web", UpIndex: tc.up}
		if got := g.OwnsDeployment(tc.active, tc.index); got != tc.want {
			t.Errorf("%s: OwnsDeployment = %v, want %v", tc.name, got, tc.want)
		}
	}
}
