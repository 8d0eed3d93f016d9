package schedule_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// oldJobSchedule is a schedule as versions before fleet schedules stored it.
const oldJobSchedule = `{"ID":"0b9d3c84-6a2e-4f1b-9c1d-3e5f7a9b1c2d","JobID":"web",
"Spec":{"BatchSizes":[{"N":1}],"OnError":"fail"},"Cron":"0 2 * * *","Grace":300000000000,
"Status":"active","Next":"2026-12-02T02:00:00Z","LastResult":"started",
"LastRestartID":"5f0c8f8e-0d5c-4f7e-8a43-2b8d1b9f3a10","Started":1,"Skipped":0,"Failed":0,"Missed":0,
"CreateTime":"2026-12-01T00:00:00Z"}`

// A schedule stored before fleet schedules existed reads as a job schedule, and writes back
// without any fleet field: older agents keep reading what newer ones write of it.
func TestOldJobScheduleStaysAJobSchedule(t *testing.T) {
	var sc schedule.Schedule
	if err := json.Unmarshal([]byte(oldJobSchedule), &sc); err != nil {
		t.Fatal(err)
	}
	if sc.IsFleet() || sc.Fleet != nil || sc.Target() != "web" || sc.JobID != "web" || sc.Kind() != "every" ||
		sc.Spec.OnError != restart.OnErrorFail || sc.LastRestartID == "" {
		t.Fatalf("read %+v", sc)
	}
	out, err := json.Marshal(&sc)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `"Fleet"`) {
		t.Fatalf("a job schedule written with a Fleet field: %s", out)
	}
}

// A fleet schedule keeps its selection (namespace as given, "*" included) and the fleet's
// options through JSON, and says it is a fleet.
func TestFleetScheduleJSON(t *testing.T) {
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.Busy = 3, fleet.BusySkip
	in := schedule.Schedule{ID: "0b9d3c84-6a2e-4f1b-9c1d-3e5f7a9b1c2d", At: time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC),
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "*", Filter: `Name matches "^api-"`}, Options: opts}}
	raw, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out schedule.Schedule
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if !out.IsFleet() || out.JobID != "" || *out.Fleet != *in.Fleet {
		t.Fatalf("read back %+v from %s", out.Fleet, raw)
	}
	if got, want := out.Target(), `fleet: Name matches "^api-"`; got != want {
		t.Errorf("Target() = %q, want %q", got, want)
	}
	if out.Kind() != "at" || out.When() != "2026-12-02T02:00:00Z" {
		t.Errorf("Kind() %q When() %q", out.Kind(), out.When())
	}
}

// The store keeps a fleet schedule in the namespace it is given (the fleet's home), lists
// it beside job schedules but not under a job, and refuses a schedule that names no job
// and no fleet, both, or a fleet it could never start.
func TestStoreFleetSchedule(t *testing.T) {
	_, cl, ctx := startWithProd(t, nomadsim.Options{})
	st := schedule.NewStore(nomadvars.New(cl, nomadvars.Options{}), "")
	t0 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	target := &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "prod", Filter: `Type == "service"`}, Options: fleet.DefaultOptions()}
	fl := &schedule.Schedule{Namespace: "prod", Fleet: target, Cron: "0 2 * * *", Next: t0}
	if err := st.Create(ctx, fl); err != nil {
		t.Fatal(err)
	}
	job := &schedule.Schedule{JobID: "web", At: t0, Next: t0}
	if err := st.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, "prod", fl.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.IsFleet() || *got.Fleet != *target || got.Namespace != "prod" {
		t.Fatalf("read back %+v (fleet %+v)", got, got.Fleet)
	}
	if all, err := st.List(ctx, "*", ""); err != nil || len(all) != 2 {
		t.Fatalf("List(*) = %d, %v", len(all), err)
	}
	if byJob, err := st.List(ctx, "*", "web"); err != nil || len(byJob) != 1 || byJob[0].ID != job.ID {
		t.Fatalf("List(job web) = %v, %v", byJob, err)
	}

	badOpts := fleet.DefaultOptions()
	badOpts.MaxParallelJobs = 0
	for _, tc := range []struct {
		name string
		sc   *schedule.Schedule
		want string
	}{
		{"neither", &schedule.Schedule{At: t0, Next: t0}, "needs a JobID or a Fleet"},
		{"both", &schedule.Schedule{JobID: "web", Fleet: target, At: t0, Next: t0}, "not both"},
		{"no filter", &schedule.Schedule{Fleet: &schedule.FleetTarget{Options: fleet.DefaultOptions()}, At: t0, Next: t0}, "selection filter"},
		{"bad options", &schedule.Schedule{Fleet: &schedule.FleetTarget{Selection: target.Selection, Options: badOpts}, At: t0, Next: t0}, "max-parallel-jobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := st.Create(ctx, tc.sc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if all, err := st.List(ctx, "*", ""); err != nil || len(all) != 2 {
		t.Fatalf("refused schedules were stored: List(*) = %d, %v", len(all), err)
	}
}
