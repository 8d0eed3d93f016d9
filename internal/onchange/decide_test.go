package onchange

import (
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cfg := Source{Kind: NomadVariable, Path: "nomad/jobs/web/config", Namespace: "default"}
	key := Source{Kind: ConsulKey, Path: "web/flags", Datacenter: "dc1"}
	group := func(name string, batch int, srcs ...Source) Group {
		g := Group{Name: name, Consent: ConsentAuto, Debounce: 10 * time.Second,
			Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: batch}}, OnError: restart.OnErrorFail}}
		for _, s := range srcs {
			g.Watched = append(g.Watched, Watched{Source: s})
		}
		return g
	}
	alloc := func(id, group string, started time.Time) *restart.Alloc {
		return &restart.Alloc{ID: id, Group: group, ClientStatus: restart.ClientRunning, DesiredStatus: restart.DesiredRun,
			Tasks: map[string]restart.TaskState{"app": {State: "running", StartedAt: started}}}
	}
	old := t0.Add(-time.Hour)
	webAllocs := []*restart.Alloc{alloc("a1", "web", old), alloc("a2", "web", old), alloc("a3", "web", t0.Add(11*time.Second))}
	changed := map[Source]SourceState{cfg: {Index: 42, Count: 1, ChangedAt: t0, PrevIndex: 41}}
	for _, tc := range []struct {
		name      string
		groups    []Group
		states    map[Source]SourceState
		allocs    []*restart.Alloc
		now       time.Time
		wantRoll  []string // groups rolled, nil: none
		wantStale int
		recheck   time.Time
	}{
		{"within the debounce: decide again when it ends", []Group{group("web", 1, cfg)}, changed, webAllocs, t0.Add(3 * time.Second), nil, 0, t0.Add(10 * time.Second)},
		{"after it: the allocations started before roll", []Group{group("web", 1, cfg)}, changed, webAllocs, t0.Add(12 * time.Second), []string{"web"}, 2, time.Time{}},
		{"all started since: nothing to do", []Group{group("web", 1, cfg)}, changed,
			[]*restart.Alloc{alloc("a1", "web", t0.Add(20*time.Second))}, t0.Add(30 * time.Second), nil, 0, time.Time{}},
		{"a Consul key first seen (no time): nothing", []Group{group("web", 1, key)},
			map[Source]SourceState{key: {Index: 7, Count: 1}}, webAllocs, t0.Add(time.Hour), nil, 0, time.Time{}},
		{"not opted in", []Group{{Name: "web", Watched: []Watched{{Source: cfg}}, Debounce: time.Second}}, changed, webAllocs, t0.Add(time.Hour), nil, 0, time.Time{}},
		{"invalid meta never rolls", []Group{func() Group {
			g := group("web", 1, cfg)
			g.Problems = []Problem{{Key: "nomad-restart.batch-size"}}
			return g
		}()},
			changed, webAllocs, t0.Add(time.Hour), nil, 0, time.Time{}},
		{"two groups with the same options roll together", []Group{group("web", 1, cfg), group("api", 1, cfg)}, changed,
			append(webAllocs, alloc("b1", "api", old)), t0.Add(time.Minute), []string{"web", "api"}, 3, time.Time{}},
		{"different options: the first group first", []Group{group("web", 1, cfg), group("api", 2, cfg)}, changed,
			append(webAllocs, alloc("b1", "api", old)), t0.Add(time.Minute), []string{"web"}, 2, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := Explain{Namespace: "default", JobID: "web", Groups: tc.groups}
			d := Decide(ex, tc.states, tc.allocs, tc.now)
			if !d.RecheckAt.Equal(tc.recheck) {
				t.Errorf("RecheckAt = %v, want %v", d.RecheckAt, tc.recheck)
			}
			if tc.wantRoll == nil {
				if d.Rollout != nil {
					t.Fatalf("rollout %+v, want none", d.Rollout)
				}
				return
			}
			r := d.Rollout
			if r == nil {
				t.Fatal("no rollout")
			}
			if len(r.Groups) != len(tc.wantRoll) || r.Stale != tc.wantStale {
				t.Fatalf("rolls %v (%d allocations), want %v (%d)", r.Groups, r.Stale, tc.wantRoll, tc.wantStale)
			}
			if !r.Spec.StartedBefore.Equal(t0.Add(10*time.Second)) || len(r.Spec.Groups) != len(tc.wantRoll) {
				t.Errorf("spec: started-before %v groups %v", r.Spec.StartedBefore, r.Spec.Groups)
			}
			if len(r.Triggers) != 1 || r.Triggers[0].Source != "nomad:nomad/jobs/web/config" || r.Triggers[0].NewIndex != 42 || r.Triggers[0].OldIndex != 41 {
				t.Errorf("triggers %+v", r.Triggers)
			}
			// Another agent deciding on the same facts names the same restart.
			if again := Decide(ex, tc.states, tc.allocs, tc.now.Add(time.Second)); again.Rollout == nil || again.Rollout.ID != r.ID {
				t.Errorf("the rollout's ID changed with the time of the decision: %+v vs %s", again.Rollout, r.ID)
			}
		})
	}
	// Placed after the change (a Raft index past the variable's): it rendered the new data
	// at its start, even within the debounce. Restarted in place within the debounce but
	// placed before: it may hold the old environment, so it rolls.
	placedAfter := alloc("p1", "web", t0.Add(2*time.Second))
	placedAfter.CreateIndex = 50
	restartedIn := alloc("p2", "web", old)
	restartedIn.CreateIndex = 10
	restartedIn.Tasks = map[string]restart.TaskState{"app": {State: "running", StartedAt: old, LastRestart: t0.Add(2 * time.Second)}}
	ex0 := Explain{Namespace: "default", JobID: "web", Groups: []Group{group("web", 1, cfg)}}
	r := Decide(ex0, changed, []*restart.Alloc{placedAfter, restartedIn}, t0.Add(time.Minute)).Rollout
	if r == nil || r.Stale != 1 || r.Spec.CreatedBeforeIndex != 42 {
		t.Fatalf("rollout %+v: want the allocation restarted in the debounce only, created before index 42", r)
	}
	if Decide(ex0, changed, []*restart.Alloc{placedAfter}, t0.Add(time.Minute)).Rollout != nil {
		t.Fatal("an allocation placed after the change was rolled")
	}

	// A newer change is a new rollout.
	ex := Explain{Namespace: "default", JobID: "web", Groups: []Group{group("web", 1, cfg)}}
	first := Decide(ex, changed, webAllocs, t0.Add(time.Minute)).Rollout
	newer := Decide(ex, map[Source]SourceState{cfg: {Index: 43, Count: 1, ChangedAt: t0.Add(time.Second)}}, webAllocs, t0.Add(time.Minute)).Rollout
	if first == nil || newer == nil || first.ID == newer.ID {
		t.Fatalf("a newer change must be another rollout: %+v, %+v", first, newer)
	}
}
