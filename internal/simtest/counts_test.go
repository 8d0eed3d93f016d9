package simtest

import (
	"slices"
	"strings"
	"testing"
)

func TestExactlyOnceNamesEachViolation(t *testing.T) {
	tests := []struct {
		name       string
		counts     Counts
		ids        []string
		reschedule bool
		want       []string // a fragment of each violation, sorted
	}{
		{
			name:   "each planned allocation restarted once in place",
			counts: Counts{InPlace: map[string]int{"a": 1, "b": 1}, Replaced: map[string]int{}},
			ids:    []string{"a", "b"},
		},
		{
			name:   "twice, never, and one outside the plan",
			counts: Counts{InPlace: map[string]int{"a": 2, "x": 1}, Replaced: map[string]int{}},
			ids:    []string{"a", "b"},
			want:   []string{"allocation a restarted 2 times", "allocation b restarted 0 times", "allocation x not in the plan"},
		},
		{
			name:       "replacements count with reschedule, in-place restarts do not",
			counts:     Counts{InPlace: map[string]int{"a": 3}, Replaced: map[string]int{"a": 1, "b": 1}},
			ids:        []string{"a", "b"},
			reschedule: true,
		},
		{
			name:       "a replacement replaced again is Nomad's doing",
			counts:     Counts{InPlace: map[string]int{}, Replaced: map[string]int{"a": 1, "a2": 1}},
			ids:        []string{"a"},
			reschedule: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.counts.ExactlyOnce(tt.ids, tt.reschedule)
			slices.Sort(got)
			if len(got) != len(tt.want) {
				t.Fatalf("violations = %q, want %d of them", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
