package engine

import (
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestHighestIndexedIsWhatAScaleDownStops: Nomad's scheduler stops, on a scale-down, the
// group's live allocations with the highest name indexes (reconciler's computeStop).
func TestHighestIndexedIsWhatAScaleDownStops(t *testing.T) {
	live := func(id, name, group string) *restart.Alloc {
		return &restart.Alloc{ID: id, Name: name, Group: group, DesiredStatus: restart.DesiredRun, ClientStatus: restart.ClientRunning}
	}
	stopped := live("s", "web.web[9]", "web")
	stopped.DesiredStatus = "stop"
	replaced := live("r", "web.web[8]", "web")
	replaced.NextAllocation = "x"
	allocs := []*restart.Alloc{
		live("a", "web.web[0]", "web"), live("c", "web.web[2]", "web"), live("d", "web.web[3]", "web"),
		live("b", "web.web[1]", "web"), live("o", "web.api[7]", "api"), stopped, replaced,
	}
	cases := []struct {
		count int
		want  string
	}{
		{3, "d"},
		{2, "d,c"},
		{4, ""},
		{5, ""},
	}
	for _, tc := range cases {
		var got []string
		for _, a := range highestIndexed(allocs, "web", tc.count) {
			got = append(got, a.ID)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("scale-down to %d stops %v, want %s", tc.count, got, tc.want)
		}
	}
	for name, want := range map[string]int{"web.web[12]": 12, "web.web": -1, "web.web[x]": -1, "a[b].c[3]": 3} {
		if got := nameIndex(name); got != want {
			t.Errorf("nameIndex(%q) = %d, want %d", name, got, want)
		}
	}
}
