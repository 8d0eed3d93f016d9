package restart

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The table follows Nomad's own filterAllocs test: a job with two versions (v1: g1 and g2
// with task_1 and task_2, g3 with task_3; v2: g1 and g2 with task_2 only), allocations in
// every desired × client status combination, each with a replaced twin.
func TestSelect(t *testing.T) {
	v1 := &Job{Version: 1, Groups: []Group{{Name: "g1", Tasks: []string{"task_1", "task_2"}}, {Name: "g2", Tasks: []string{"task_1", "task_2"}}, {Name: "g3", Tasks: []string{"task_3"}}}}
	v2 := &Job{Version: 2, Groups: []Group{{Name: "g1", Tasks: []string{"task_2"}}, {Name: "g2", Tasks: []string{"task_2"}}}}
	versions := map[uint64]*Job{1: v1, 2: v2}

	var allocs []*Alloc
	idx := uint64(0)
	for _, spec := range []struct {
		group   string
		version uint64
	}{{"g1", 1}, {"g2", 2}, {"g3", 1}} {
		for _, desired := range []string{DesiredRun, DesiredStop} {
			for _, client := range []string{ClientRunning, ClientComplete} {
				for _, replaced := range []bool{false, true} {
					idx++
					a := &Alloc{
						ID:            fmt.Sprintf("%s-%s-%s-%v", spec.group, desired, client, replaced),
						Group:         spec.group,
						JobVersion:    spec.version,
						DesiredStatus: desired,
						ClientStatus:  client,
						CreateIndex:   idx,
					}
					if replaced {
						a.NextAllocation = "next-" + a.ID
					}
					allocs = append(allocs, a)
				}
			}
		}
	}
	kept := func(groups ...string) []string {
		var out []string
		for i := len(allocs) - 1; i >= 0; i-- { // newest first
			a := allocs[i]
			if a.NextAllocation != "" || (a.DesiredStatus == DesiredStop && a.ClientStatus == ClientComplete) {
				continue
			}
			for _, g := range groups {
				if a.Group == g {
					out = append(out, a.ID)
				}
			}
		}
		return out
	}
	cases := []struct {
		name string
		sel  Selection
		want []string
	}{
		{"all", Selection{}, kept("g1", "g2", "g3")},
		{"group g1", Selection{Groups: []string{"g1"}}, kept("g1")},
		{"groups g1 g3", Selection{Groups: []string{"g1", "g3"}}, kept("g1", "g3")},
		{"old task through version", Selection{Tasks: []string{"task_3"}}, kept("g3")},
		{"task_1 only in v1 groups", Selection{Tasks: []string{"task_1"}}, kept("g1")},
		{"task_2", Selection{Tasks: []string{"task_2"}}, kept("g1", "g2")},
		{"group and task", Selection{Groups: []string{"g3"}, Tasks: []string{"task_2"}}, nil},
		{"unknown group", Selection{Groups: []string{"nope"}}, nil},
		{"unknown task", Selection{Tasks: []string{"nope"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := Select(allocs, versions, tc.sel)
			var ids []string
			for _, a := range got {
				ids = append(ids, a.ID)
			}
			if !reflect.DeepEqual(ids, tc.want) {
				t.Fatalf("kept %v, want %v", ids, tc.want)
			}
			if len(got)+len(skipped) != len(allocs) {
				t.Fatalf("kept %d + skipped %d != %d", len(got), len(skipped), len(allocs))
			}
			for _, s := range skipped {
				if s.Reason == "" {
					t.Fatalf("skip of %s has no reason", s.Alloc.ID)
				}
			}
		})
	}
}

func TestSelectReasons(t *testing.T) {
	allocs := []*Alloc{
		{ID: "a", DesiredStatus: DesiredStop, ClientStatus: ClientComplete, CreateIndex: 1},
		{ID: "b", DesiredStatus: DesiredRun, ClientStatus: ClientRunning, NextAllocation: "c", CreateIndex: 2},
		{ID: "d", DesiredStatus: DesiredRun, ClientStatus: ClientRunning, Group: "x", CreateIndex: 3},
	}
	_, skipped := Select(allocs, nil, Selection{Groups: []string{"y"}})
	want := map[string]string{
		"a": `desired status is "stop" and client status is "complete"`,
		"b": `it has already been replaced by "c"`,
		"d": "it doesn't have any of requested groups",
	}
	for _, s := range skipped {
		if want[s.Alloc.ID] != s.Reason {
			t.Errorf("%s: reason %q, want %q", s.Alloc.ID, s.Reason, want[s.Alloc.ID])
		}
	}
	if len(skipped) != 3 {
		t.Fatalf("skipped %d, want 3", len(skipped))
	}
}

func TestHasTaskPrefersTaskStates(t *testing.T) {
	a := &Alloc{Group: "g", JobVersion: 9, Tasks: map[string]TaskState{"live": {}}}
	if !a.HasTask("live", nil) {
		t.Fatal("task state not used")
	}
	if a.HasTask("other", map[uint64]*Job{1: {Groups: []Group{{Name: "g", Tasks: []string{"other"}}}}}) {
		t.Fatal("task of another version matched")
	}
	if got := TasksToRestart(a, nil, []string{"live", "x", "live"}); !reflect.DeepEqual(got, []string{"live"}) {
		t.Fatalf("TasksToRestart = %v", got)
	}
}

// A config-change rollout restarts only the allocations whose targeted tasks started
// before the change: one placed or restarted since already runs with the new data.
func TestSelectStartedBefore(t *testing.T) {
	change := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	before, after := change.Add(-time.Hour), change.Add(time.Minute)
	alloc := func(id string, tasks map[string]TaskState) *Alloc {
		return &Alloc{ID: id, ClientStatus: ClientRunning, DesiredStatus: DesiredRun, Tasks: tasks}
	}
	for _, tc := range []struct {
		name  string
		alloc *Alloc
		tasks []string
		kept  bool
	}{
		{"started before the change", alloc("a", map[string]TaskState{"web": {StartedAt: before}}), nil, true},
		{"started after it", alloc("b", map[string]TaskState{"web": {StartedAt: after}}), nil, false},
		{"started before, restarted after", alloc("c", map[string]TaskState{"web": {StartedAt: before, LastRestart: after}}), nil, false},
		{"one task of two started after", alloc("d", map[string]TaskState{"web": {StartedAt: after}, "log": {StartedAt: before}}), nil, true},
		{"the named task started after", alloc("e", map[string]TaskState{"web": {StartedAt: after}, "log": {StartedAt: before}}), []string{"web"}, false},
		{"no task reported yet", alloc("f", nil), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, skipped := Select([]*Alloc{tc.alloc}, nil, Selection{Tasks: tc.tasks, StartedBefore: change})
			if got := len(kept) == 1; got != tc.kept {
				t.Fatalf("kept = %v, want %v (skipped: %+v)", got, tc.kept, skipped)
			}
			if !tc.kept && !strings.Contains(skipped[0].Reason, "started after 2026-12-01T12:00:00Z") {
				t.Fatalf("reason %q", skipped[0].Reason)
			}
		})
	}
	// Without the rule, the same allocation is kept.
	if kept, _ := Select([]*Alloc{alloc("g", map[string]TaskState{"web": {StartedAt: after}})}, nil, Selection{}); len(kept) != 1 {
		t.Fatal("an allocation started recently was left out without StartedBefore")
	}
}

// A config-change rollout leaves out the allocations placed after the change.
func TestSelectCreatedBeforeIndex(t *testing.T) {
	before := &Alloc{ID: "a", CreateIndex: 10, ClientStatus: ClientRunning, DesiredStatus: DesiredRun}
	after := &Alloc{ID: "b", CreateIndex: 50, ClientStatus: ClientRunning, DesiredStatus: DesiredRun}
	kept, skipped := Select([]*Alloc{before, after}, nil, Selection{CreatedBeforeIndex: 42})
	if len(kept) != 1 || kept[0].ID != "a" || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "placed after the change") {
		t.Fatalf("kept %+v skipped %+v", kept, skipped)
	}
}
