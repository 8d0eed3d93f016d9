package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestConvertRecordedAllocationAfterRestart(t *testing.T) {
	var a api.Allocation
	loadExchange(t, "22-allocation-after-restart").decodeBody(t, &a)
	got := convertAlloc(&a)

	if got.ID != "0c167182-0c38-d4a7-de65-1e23946d2e45" || got.JobID != "sleepy" || got.Group != "g" {
		t.Fatalf("identity: got %+v", got)
	}
	if got.ModifyIndex != 31 || got.ClientStatus != restart.ClientRunning || got.DesiredStatus != restart.DesiredRun {
		t.Fatalf("status: got modify index %d, %s/%s", got.ModifyIndex, got.DesiredStatus, got.ClientStatus)
	}
	main, ok := got.Tasks["main"]
	if !ok {
		t.Fatalf("task main missing: %+v", got.Tasks)
	}
	if main.State != restart.TaskRunning || main.Restarts != 1 {
		t.Fatalf("task main: state %q restarts %d", main.State, main.Restarts)
	}
	wantLastRestart := time.Date(2026, 11, 30, 3, 18, 9, 962954620, time.UTC)
	if !main.LastRestart.Equal(wantLastRestart) {
		t.Fatalf("LastRestart = %v, want %v", main.LastRestart, wantLastRestart)
	}
	wantTypes := []string{"Received", "Task Setup", restart.TaskEventStarted, restart.TaskEventRestartSignaled,
		restart.TaskEventTerminated, restart.TaskEventRestarting, restart.TaskEventStarted}
	if len(main.Events) != len(wantTypes) {
		t.Fatalf("got %d events, want %d", len(main.Events), len(wantTypes))
	}
	for i, ev := range main.Events {
		if ev.Type != wantTypes[i] {
			t.Errorf("event %d type %q, want %q", i, ev.Type, wantTypes[i])
		}
	}
	// Event times are Unix nanoseconds on Nomad's clock: the restart signal came
	// 1796008684957107165 ns after the epoch.
	if want := time.Unix(0, 1796008684957107165); !main.Events[3].Time.Equal(want) {
		t.Fatalf("Restart Signaled at %v, want %v", main.Events[3].Time, want)
	}
	// The last Started follows the restart and matches StartedAt to the microsecond.
	if d := main.StartedAt.Sub(main.Events[6].Time); d < 0 || d > time.Millisecond {
		t.Fatalf("StartedAt %v vs last Started event %v", main.StartedAt, main.Events[6].Time)
	}
}

func TestConvertRecordedAllocationBeforeRestart(t *testing.T) {
	var a api.Allocation
	loadExchange(t, "19-allocation-read").decodeBody(t, &a)
	got := convertAlloc(&a)
	main := got.Tasks["main"]
	if main.Restarts != 0 || !main.LastRestart.IsZero() {
		t.Fatalf("a task never restarted has restarts %d, last restart %v", main.Restarts, main.LastRestart)
	}
	if got.NodeID == "" || got.NodeName == "" || got.Name == "" {
		t.Fatalf("node or name missing: %+v", got)
	}
}

func TestConvertRecordedJob(t *testing.T) {
	var j api.Job
	loadExchange(t, "09-job-read").decodeBody(t, &j)
	got := convertJob(&j)
	want := &restart.Job{ID: "sleepy", Namespace: "default", Region: "global", Type: "service", Version: 0, Datacenters: []string{"dc1"},
		ModifyIndex: got.ModifyIndex, Groups: []restart.Group{{Name: "g", Count: 3, Tasks: []string{"main"}}}}
	if got.ModifyIndex == 0 {
		t.Fatal("ModifyIndex not converted")
	}
	if got.ID != want.ID || got.Namespace != want.Namespace || got.Region != want.Region || got.Type != want.Type ||
		got.MultiRegion || len(got.Groups) != 1 || got.Groups[0].Name != "g" || got.Groups[0].Count != 3 ||
		len(got.Groups[0].Tasks) != 1 || got.Groups[0].Tasks[0] != "main" || !slices.Equal(got.Datacenters, []string{"dc1"}) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestConvertJobMultiRegion(t *testing.T) {
	for _, tc := range []struct {
		name string
		mr   *api.Multiregion
		want bool
	}{
		{"none", nil, false},
		{"empty block", &api.Multiregion{}, false},
		{"regions", &api.Multiregion{Regions: []*api.MultiregionRegion{{Name: "east"}, {Name: "west"}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := api.NewServiceJob("web", "web", "global", 50)
			j.Multiregion = tc.mr
			if got := convertJob(j).MultiRegion; got != tc.want {
				t.Fatalf("MultiRegion = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConvertTaskStatesNilStaysNil(t *testing.T) {
	if got := convertTaskStates(nil); got != nil {
		t.Fatalf("got %v for no task states", got)
	}
	got := convertTaskStates(map[string]*api.TaskState{"a": {State: "pending"}, "b": nil})
	if len(got) != 1 || got["a"].State != "pending" || got["a"].Events != nil {
		t.Fatalf("got %+v", got)
	}
}

func TestConvertTaskEventPrefersDisplayMessage(t *testing.T) {
	ev := convertTaskEvent(&api.TaskEvent{Type: "Killing", Time: 5, DisplayMessage: "Sent interrupt", Message: "raw"})
	if ev.Message != "Sent interrupt" || !ev.Time.Equal(time.Unix(0, 5)) {
		t.Fatalf("got %+v", ev)
	}
	ev = convertTaskEvent(&api.TaskEvent{Type: "Killing", Message: "raw"})
	if ev.Message != "raw" || !ev.Time.IsZero() {
		t.Fatalf("got %+v", ev)
	}
}
