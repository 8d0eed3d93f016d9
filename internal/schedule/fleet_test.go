package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
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
	// A fleet in waves: each occurrence sorts its jobs anew by these.
	after, err := fleet.ParseAfter("web: api, db/db-proxy")
	if err != nil {
		t.Fatal(err)
	}
	opts.After, opts.AfterOutside, opts.WaveWait = []fleet.Dependency{after}, fleet.AfterOutsideIgnore, 30*time.Second
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
	if !out.IsFleet() || out.JobID != "" || out.Fleet.Selection != in.Fleet.Selection || !sameJSON(t, out.Fleet.Options, in.Fleet.Options) || out.Fleet.Options.After[0].String() != "web: api, db/db-proxy" {
		t.Fatalf("read back %+v from %s", out.Fleet, raw)
	}
	if got, want := out.Target(), `fleet: Name matches "^api-"`; got != want {
		t.Errorf("Target() = %q, want %q", got, want)
	}
	if out.Kind() != "at" || out.When() != "2026-12-02T02:00:00Z" {
		t.Errorf("Kind() %q When() %q", out.Kind(), out.When())
	}
}

// sameJSON reports whether a and b are stored alike: what a schedule keeps is its JSON.
func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		t.Fatalf("JSON: %v, %v", errA, errB)
	}
	return string(ja) == string(jb)
}

// The store keeps a fleet schedule in the namespace it is given (the fleet's home), lists
// it beside job schedules but not under a job, and refuses a schedule that names no job
// and no fleet, both, or a fleet it could never start.
func TestStoreFleetSchedule(t *testing.T) {
	_, cl, ctx := startWithProd(t, nomadsim.Options{})
	st := storeOn(cl)
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
	if !got.IsFleet() || got.Fleet.Selection != target.Selection || !sameJSON(t, got.Fleet.Options, target.Options) || got.Namespace != "prod" {
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

// A fleet schedule's member marker is written (again) in another namespace, read back as
// written, never listed as a schedule, and removed by DeleteMembers; a token without rights
// there is refused with a PermissionError.
func TestScheduleMemberMarker(t *testing.T) {
	c, admin, ctx := startWithProd(t, nomadsim.Options{ACLs: true})
	s := storeOn(admin)
	due := time.Now().Add(time.Hour).UTC()
	sc := &schedule.Schedule{At: due, Next: due, Namespace: "default",
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "*", Filter: `Name matches "^api-"`}, Options: fleet.DefaultOptions()}}
	sc.SetSpec(restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	if err := s.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Member(ctx, "prod", sc.ID); !errors.Is(err, schedule.ErrNoMember) {
		t.Fatalf("Member before any was written: got %v, want ErrNoMember", err)
	}
	want := schedule.MemberOf(sc)
	if want != (schedule.Member{Home: "default", Filter: `Name matches "^api-"`}) {
		t.Fatalf("MemberOf: %+v", want)
	}
	for range 2 { // the second write overwrites the first
		if err := s.PutMember(ctx, "prod", sc.ID, want); err != nil {
			t.Fatalf("PutMember: %v", err)
		}
	}
	if got, err := s.Member(ctx, "prod", sc.ID); err != nil || got != want {
		t.Fatalf("Member: %+v, %v; want %+v", got, err, want)
	}
	list, err := s.List(ctx, "*", "")
	if err != nil || len(list) != 1 || list[0].ID != sc.ID || list[0].Namespace != "default" {
		t.Fatalf("List(*) with a marker in prod: %d schedules, %v; want the one in default", len(list), err)
	}
	if _, err := s.Get(ctx, "prod", sc.ID); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("Get in the marker's namespace: got %v, want ErrNotFound", err)
	}

	token := simtest.Token(t, c, "default-writer", `
namespace "default" { variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } } }`)
	var perm *schedule.PermissionError
	if err := storeOn(simtest.ClientAs(t, c, token)).PutMember(ctx, "prod", sc.ID, want); !errors.As(err, &perm) || perm.Namespace != "prod" {
		t.Fatalf("PutMember in prod with a default-only token: got %v, want a PermissionError in prod", err)
	}

	if err := s.DeleteMembers(ctx, sc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Member(ctx, "prod", sc.ID); !errors.Is(err, schedule.ErrNoMember) {
		t.Errorf("Member after DeleteMembers: got %v, want ErrNoMember", err)
	}
	if _, err := s.Get(ctx, "default", sc.ID); err != nil {
		t.Errorf("DeleteMembers removed the schedule itself: %v", err)
	}
}
