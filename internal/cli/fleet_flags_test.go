package cli

import (
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestParseRunArgsFleet(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want fleet.Options
	}{
		{"defaults", []string{"-jobs", `Type == "service"`, "-on-error=fail"},
			fleet.Options{MaxParallelJobs: 1, MaxFailedJobs: 0, Order: fleet.OrderName, Busy: fleet.BusyWait, OnError: restart.OnErrorFail}},
		{"every option", []string{"-jobs", `Type == "service"`, "-max-parallel-jobs", "5", "-max-failed-jobs=2", "-order=priority", "-busy", "skip", "-detach"},
			fleet.Options{MaxParallelJobs: 5, MaxFailedJobs: 2, Order: fleet.OrderPriority, Busy: fleet.BusySkip, OnError: restart.OnErrorAsk}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseRunArgs(tc.args, false)
			if err != nil {
				t.Fatal(err)
			}
			if !o.fleet.selected() || o.job != "" || o.fleet.opts != tc.want {
				t.Errorf("fleet %+v, job %q; want options %+v", o.fleet, o.job, tc.want)
			}
			if o.spec.OnError != tc.want.OnError {
				t.Errorf("the children's -on-error %q, want the fleet's %q", o.spec.OnError, tc.want.OnError)
			}
		})
	}
	if o, err := parseRunArgs([]string{"-on-error=fail", "web"}, false); err != nil || o.fleet.selected() || o.job != "web" {
		t.Errorf("a run of one job: %+v, %v", o, err)
	}
}
