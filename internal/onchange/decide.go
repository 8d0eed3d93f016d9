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
		newest := newestChange(g, states)
		if newest.at.IsZero() {
			continue
		}
		due := newest.at.Add(g.Debounce)
		if now.Before(due) {
			if d.RecheckAt.IsZero() || due.Before(d.RecheckAt) {
				d.RecheckAt = due
			}
			continue
		}
		spec := g.Spec
		spec.Groups = []string{g.Name}
		spec.StartedBefore, spec.CreatedBeforeIndex = due, newest.nomadIndex
		stale := staleAllocs(allocs, spec)
		if stale == 0 {
			continue
		}
		if pick == nil {
			pick = &Rollout{Spec: spec}
			pick.Spec.Groups = nil
		}
		if sameOptions(pick.Spec, g.Spec) {
			pick.Groups = append(pick.Groups, g.Name)
			pick.Stale += stale
			pick.Triggers = mergeTriggers(pick.Triggers, newest.triggers)
			pick.Spec.StartedBefore = maxTime(pick.Spec.StartedBefore, due)
			pick.Spec.CreatedBeforeIndex = max(pick.Spec.CreatedBeforeIndex, newest.nomadIndex)
		}
	}
	if pick != nil {
		pick.Spec.Groups = pick.Groups
		pick.ID = rolloutID(ex, pick)
		d.Rollout = pick
	}
	return d
}

// change is a group's newest known change: when, the triggers (one per source that has
// changed), and the Raft index of the newest Nomad source when it is the newest change (0
// otherwise: Consul's indexes are not Nomad's).
type change struct {
	at         time.Time
	triggers   []restart.Trigger
	nomadIndex uint64
}

func newestChange(g Group, states map[Source]SourceState) change {
	var c change
	for _, w := range g.Watched {
		st, ok := states[w.Source]
		if !ok || st.ChangedAt.IsZero() {
			continue
		}
		if st.ChangedAt.After(c.at) {
			c.at, c.nomadIndex = st.ChangedAt, 0
			if w.Source.Kind.Nomad() {
				c.nomadIndex = st.Index
			}
		}
		c.triggers = append(c.triggers, restart.Trigger{Source: w.Source.Ref(), OldIndex: st.PrevIndex, NewIndex: st.Index, ChangedAt: st.ChangedAt})
	}
	return c
}

// staleAllocs counts the allocations of spec's group that a rollout planned with spec
// restarts, as the planner selects them: running, placed before the change, with a task
// started, or last restarted, before the debounce ended (one restarted in place between
// the change and Nomad's re-render kept the old environment). One that has not reported
// its tasks yet is starting now, with the new data.
func staleAllocs(allocs []*restart.Alloc, spec restart.Spec) int {
	kept, _ := restart.Select(allocs, nil, restart.Selection{Groups: spec.Groups, StartedBefore: spec.StartedBefore, CreatedBeforeIndex: spec.CreatedBeforeIndex})
	n := 0
	for _, a := range kept {
		if len(a.Tasks) > 0 {
			n++
		}
	}
	return n
}

// sameOptions reports whether two groups' rollouts can be one restart.
func sameOptions(a, b restart.Spec) bool {
	a.Groups, b.Groups = nil, nil
	a.StartedBefore, b.StartedBefore = time.Time{}, time.Time{}
	a.CreatedBeforeIndex, b.CreatedBeforeIndex = 0, 0
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
