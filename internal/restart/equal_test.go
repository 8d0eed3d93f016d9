package restart

import (
	"reflect"
	"testing"
	"time"
)

// A field added to AllocProgress or Observation must be compared by Same: otherwise a
// change to it alone would not be written by the Nomad store.
func TestSameCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[AllocProgress]().NumField(); n != 17 {
		t.Fatalf("AllocProgress has %d fields; compare the new ones in AllocProgress.Same, then update this count", n)
	}
	if n := reflect.TypeFor[Observation]().NumField(); n != 4 {
		t.Fatalf("Observation has %d fields; compare the new ones in Observation.Same, then update this count", n)
	}
}

func TestSame(t *testing.T) {
	at := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	base := func() AllocProgress {
		seen := at
		return AllocProgress{ID: "a", Name: "web[0]", Group: "web", NodeID: "n", Batch: 1, State: AllocWaiting,
			Tasks: []string{"t"}, Before: &Observation{Restarts: map[string]uint64{"t": 1}, States: map[string]string{"t": "running"},
				LastEventTime: at, AllocModifyIndex: 7}, Replacement: "b", StartTime: at, EndTime: at, Error: "e",
			Waiting: "w", Unrecovered: true, Attempts: 1, StopIndex: 3, LastSeen: &seen}
	}
	for _, tc := range []struct {
		name   string
		change func(p *AllocProgress)
		same   bool
	}{
		{"identical copy", func(p *AllocProgress) {}, true},
		{"same instant elsewhere", func(p *AllocProgress) { p.StartTime = at.In(time.FixedZone("x", 3600)) }, true},
		{"equal observation, other pointer", func(p *AllocProgress) { o := *p.Before; p.Before = &o }, true},
		{"state", func(p *AllocProgress) { p.State = AllocDone }, false},
		{"tasks", func(p *AllocProgress) { p.Tasks = []string{"u"} }, false},
		{"restart counter", func(p *AllocProgress) {
			p.Before = &Observation{Restarts: map[string]uint64{"t": 2}, States: p.Before.States, LastEventTime: at, AllocModifyIndex: 7}
		}, false},
		{"no observation", func(p *AllocProgress) { p.Before = nil }, false},
		{"end time", func(p *AllocProgress) { p.EndTime = at.Add(time.Second) }, false},
		{"last seen", func(p *AllocProgress) { p.LastSeen = nil }, false},
		{"waiting", func(p *AllocProgress) { p.Waiting = "x" }, false},
		{"attempts", func(p *AllocProgress) { p.Attempts++ }, false},
		{"stop index", func(p *AllocProgress) { p.StopIndex++ }, false},
		{"replacement", func(p *AllocProgress) { p.Replacement = "c" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base(), base()
			tc.change(&b)
			if got := a.Same(&b); got != tc.same {
				t.Fatalf("Same = %v, want %v", got, tc.same)
			}
			if got := b.Same(&a); got != tc.same {
				t.Fatalf("Same (reversed) = %v, want %v", got, tc.same)
			}
		})
	}
}
