package onchange

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// SourceState is what a watched source shows: its newest modify index, how many entries it
// covers, and when it last changed (Nomad's ModifyTime; for Consul, which keeps no time,
// when the agent saw the change; zero when unknown, as for a Consul key first seen at the
// agent's start).
type SourceState struct {
	Index     uint64
	Count     int
	ChangedAt time.Time
	// PrevIndex is the index before the last change seen (0: none seen).
	PrevIndex uint64
}

// Rollout is a restart a job needs now: the groups it covers (those that share one set of
// options), the spec to plan it with, the changes it answers, and its ID, derived from
// them so that every agent that decides it files the same restart, and the store keeps
// one (a second Create of the ID fails).
type Rollout struct {
	ID       string
	Groups   []string
	Spec     restart.Spec
	Triggers []restart.Trigger
	// Stale counts the allocations it would restart.
	Stale int
}

// Decision is Decide's answer: a rollout to file now, or none, and when to decide again
// (zero: on the next change).
type Decision struct {
	Rollout *Rollout
	// RecheckAt is when a change still in its debounce comes due.
	RecheckAt time.Time
}

// Decide says whether the job needs a rollout now, level-triggered: a group that opted in
// needs one when, its debounce passed since the newest change of its sources, some of its
// allocations run tasks started before that moment (they hold the old data: Nomad
// re-renders a template within its wait, which the debounce must exceed, and a task
// started before the re-render kept the old environment). An allocation started since
// already has the new data and is left alone. So a change made while no agent ran is
// rolled when one starts, a rollout that ended leaves nothing to do, and a change during a
// rollout is rolled after it (the allocations it restarted before the change once more).
//
// Groups whose options differ roll one after the other: the first in the job's order
// that needs it now. allocs are the job's allocations; states the sources' last states.
func Decide(ex Explain, states map[Source]SourceState, allocs []*restart.Alloc, now time.Time) Decision {
	var d Decision
	var pick *Rollout
	for _, g := range ex.Groups {
		if !g.Rolls() {
			continue
		}
		changed, triggers := newestChange(g, states)
		if changed.IsZero() {
			continue
		}
		due := changed.Add(g.Debounce)
		if now.Before(due) {
			if d.RecheckAt.IsZero() || due.Before(d.RecheckAt) {
				d.RecheckAt = due
			}
			continue
		}
		stale := staleAllocs(allocs, g.Name, due)
		if stale == 0 {
			continue
		}
		if pick == nil {
			spec := g.Spec
			spec.StartedBefore = due
			pick = &Rollout{Spec: spec, Triggers: triggers}
		}
		if sameOptions(pick.Spec, g.Spec) {
			pick.Groups = append(pick.Groups, g.Name)
			pick.Stale += stale
			pick.Triggers = mergeTriggers(pick.Triggers, triggers)
			pick.Spec.StartedBefore = maxTime(pick.Spec.StartedBefore, due)
		}
	}
	if pick != nil {
		pick.Spec.Groups = pick.Groups
		pick.ID = rolloutID(ex, pick)
		d.Rollout = pick
	}
	return d
}

// newestChange is the newest known change among the group's sources, with a trigger per
// source that has one.
func newestChange(g Group, states map[Source]SourceState) (time.Time, []restart.Trigger) {
	var newest time.Time
	var triggers []restart.Trigger
	for _, w := range g.Watched {
		st, ok := states[w.Source]
		if !ok || st.ChangedAt.IsZero() {
			continue
		}
		newest = maxTime(newest, st.ChangedAt)
		triggers = append(triggers, restart.Trigger{Source: w.Source.Ref(), OldIndex: st.PrevIndex, NewIndex: st.Index, ChangedAt: st.ChangedAt})
	}
	return newest, triggers
}

// staleAllocs counts the group's allocations that run (as Nomad's command selects them)
// with a task started, or last restarted, no later than before: none has the data since.
func staleAllocs(allocs []*restart.Alloc, group string, before time.Time) int {
	kept, _ := restart.Select(allocs, nil, restart.Selection{Groups: []string{group}, StartedBefore: before})
	n := 0
	for _, a := range kept {
		if len(a.Tasks) > 0 { // one that has not reported its tasks yet is starting now
			n++
		}
	}
	return n
}

// sameOptions reports whether two groups' rollouts can be one restart.
func sameOptions(a, b restart.Spec) bool {
	a.Groups, b.Groups = nil, nil
	a.StartedBefore, b.StartedBefore = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func mergeTriggers(have, more []restart.Trigger) []restart.Trigger {
	for _, t := range more {
		if !slices.ContainsFunc(have, func(h restart.Trigger) bool { return h.Source == t.Source }) {
			have = append(have, t)
		}
	}
	slices.SortFunc(have, func(a, b restart.Trigger) int { return strings.Compare(a.Source, b.Source) })
	return have
}

// rolloutID names the rollout by what it answers: the job, its groups and the sources'
// indexes. Two agents deciding on the same states name it alike.
func rolloutID(ex Explain, r *Rollout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nomad-restart:rollout:%s\x00%s\x00%s", ex.Namespace, ex.JobID, strings.Join(r.Groups, ","))
	for _, t := range r.Triggers {
		fmt.Fprintf(&b, "\x00%s=%d", t.Source, t.NewIndex)
	}
	// A name-based UUID (RFC 4122 version 5): the same name, the same ID, on any agent.
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(b.String())).String()
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
