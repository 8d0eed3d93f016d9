package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// run -at and run -every store schedules (and nothing else), schedules lists them, and
// unschedule removes one by a prefix of its ID.
func TestScheduleCommands(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{},
		simpleJob("web", api.JobTypeService, 2), simpleJob("api", api.JobTypeService, 1))
	ctx := testCtx(t)
	cl := adminClient(t, c)
	ss := nomadSchedules(cl)

	at := time.Now().Add(36 * time.Hour).UTC().Truncate(time.Second)
	code, out, errOut := e.run(ctx, "run", "-at", at.Format(time.RFC3339), "-batch-size=2", "-group=web", "web")
	if code != 0 {
		t.Fatalf("run -at: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `Schedule `) || !strings.Contains(out, `of job "web" created: next due `+output.FormatTime(at)) {
		t.Fatalf("run -at printed:\n%s", out)
	}
	code, out, errOut = e.run(ctx, "run", "-every", "30 2 * * *", "-time-zone", "America/New_York", "-schedule-grace", "10m", "-json", "-on-error=fail", "ap")
	if code != 0 {
		t.Fatalf("run -every: exit %d\n%s\n%s", code, out, errOut)
	}
	var every schedule.Schedule
	if err := json.Unmarshal([]byte(out), &every); err != nil {
		t.Fatalf("run -every -json printed %q: %v", out, err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	if every.JobID != "api" || every.Cron != "30 2 * * *" || every.Grace != 10*time.Minute || every.Spec.OnError != restart.OnErrorFail {
		t.Fatalf("stored %+v", every)
	}
	if n := every.Next.In(ny); n.Hour() != 2 || n.Minute() != 30 || !n.After(time.Now()) || n.After(time.Now().Add(25*time.Hour)) {
		t.Fatalf("next due %v, want the next 02:30 in New York", n)
	}

	list, err := ss.List(ctx, "*", "")
	if err != nil || len(list) != 2 {
		t.Fatalf("stored schedules: %v, %v", list, err)
	}
	var web *schedule.Schedule
	for _, s := range list {
		if s.JobID == "web" {
			web = s
		}
	}
	if web == nil || !web.At.Equal(at) || !web.Next.Equal(at) || web.Grace != schedule.DefaultGrace || web.Spec.Groups[0] != "web" ||
		web.Spec.BatchSizes[0].N != 2 || web.Spec.OnError != restart.OnErrorAsk || web.CreatedBy == "" {
		t.Fatalf("the -at schedule: %+v", web)
	}
	// Scheduling writes no restart record.
	recs, err := nomadRestarts(cl).List(ctx, store.Filter{Namespace: "*"})
	if err != nil || len(recs) != 0 {
		t.Fatalf("restart records after scheduling: %d, %v", len(recs), err)
	}

	code, out, errOut = e.run(ctx, "schedules")
	if code != 0 || !strings.Contains(out, "Next Due") || !strings.Contains(out, web.ID[:8]) || !strings.Contains(out, every.ID[:8]) ||
		!strings.Contains(out, `"30 2 * * *" (America/New_York)`) {
		t.Fatalf("schedules: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = e.run(ctx, "schedules", "-job", "api", "-json")
	var onlyAPI []schedule.Schedule
	if code != 0 || json.Unmarshal([]byte(out), &onlyAPI) != nil || len(onlyAPI) != 1 || onlyAPI[0].ID != every.ID {
		t.Fatalf("schedules -job api -json: exit %d\n%s", code, out)
	}

	code, out, errOut = e.run(ctx, "unschedule", web.ID[:6])
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("unschedule: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := ss.Get(ctx, "default", web.ID); err == nil {
		t.Fatal("the schedule is still there")
	}
	code, out, _ = e.run(ctx, "schedules", "-job", "web")
	if code != 0 || !strings.Contains(out, `No schedules of job "web"`) {
		t.Fatalf("schedules after unschedule: %d\n%s", code, out)
	}
}

// A token that may restart the job but not write the store's variables gets one line
// naming the policy to grant, and no schedule.
func TestScheduleWithoutVariablePermission(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{ACLs: true}, simpleJob("secure", api.JobTypeService, 1))
	e.token = simtest.Token(t, c, "operator", `namespace "default" { capabilities = ["read-job", "list-jobs", "alloc-lifecycle"] }`)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-every", "@daily", "secure")
	if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "Permission denied") || !strings.Contains(errOut, `path "nomad-restart/*"`) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if list, err := nomadSchedules(adminClient(t, c)).List(ctx, "*", ""); err != nil || len(list) != 0 {
		t.Fatalf("schedules: %v, %v", list, err)
	}
}

// run -jobs '<filter>' -at and -every store fleet schedules (and nothing else) in the
// fleet's home namespace, after selecting the jobs with the user's token; schedules shows
// them as fleets, -job leaves them out, and unschedule removes one.
func TestScheduleFleetCommands(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{},
		simpleJob("fl-web", api.JobTypeService, 2), simpleJob("fl-api", api.JobTypeService, 1), simpleJob("other", api.JobTypeService, 1))
	ctx := testCtx(t)
	cl := adminClient(t, c)
	ss := nomadSchedules(cl)
	const filter = `Name matches "^fl-"`

	at := time.Now().Add(36 * time.Hour).UTC().Truncate(time.Second)
	code, out, errOut := e.run(ctx, "run", "-jobs", filter, "-at", at.Format(time.RFC3339), "-max-parallel-jobs", "2", "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -jobs -at: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "of a fleet created: 2 jobs selected by -namespace 'default' -jobs '"+filter+"' now; next due "+output.FormatTime(at)) {
		t.Fatalf("run -jobs -at printed:\n%s", out)
	}
	code, out, errOut = e.run(ctx, "run", "-namespace", "*", "-jobs", filter, "-every", "@daily", "-busy", "skip", "-json", "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -namespace '*' -jobs -every: exit %d\n%s\n%s", code, out, errOut)
	}
	var every schedule.Schedule
	if err := json.Unmarshal([]byte(out), &every); err != nil {
		t.Fatalf("run -jobs -every -json printed %q: %v", out, err)
	}
	if !every.IsFleet() || every.Fleet.Selection != (fleet.Selection{Namespace: "*", Filter: filter}) || every.Fleet.Options.Busy != fleet.BusySkip ||
		every.JobID != "" || every.Cron != "@daily" {
		t.Fatalf("stored %+v (fleet %+v)", every, every.Fleet)
	}

	list, err := ss.List(ctx, "*", "")
	if err != nil || len(list) != 2 {
		t.Fatalf("stored schedules: %v, %v", list, err)
	}
	var once *schedule.Schedule
	for _, s := range list {
		if s.Namespace != "default" {
			t.Errorf("schedule %s stored in namespace %q; a fleet schedule lives in the fleet's home, default", s.ID, s.Namespace)
		}
		if s.Kind() == "at" {
			once = s
		}
	}
	if once == nil || !once.IsFleet() || once.Fleet.Selection != (fleet.Selection{Namespace: "default", Filter: filter}) ||
		once.Fleet.Options.MaxParallelJobs != 2 || once.Fleet.Options.OnError != restart.OnErrorFail || once.Spec.OnError != restart.OnErrorFail ||
		!once.Next.Equal(at) || once.CreatedBy == "" {
		t.Fatalf("the -at fleet schedule: %+v", once)
	}
	// Scheduling writes no fleet and no restart record.
	if fleets, err := nomadFleets(cl, 0).List(ctx, "*", false); err != nil || len(fleets) != 0 {
		t.Errorf("fleets after scheduling: %d, %v", len(fleets), err)
	}
	if recs, err := nomadRestarts(cl).List(ctx, store.Filter{Namespace: "*"}); err != nil || len(recs) != 0 {
		t.Errorf("restart records after scheduling: %d, %v", len(recs), err)
	}

	code, out, errOut = e.run(ctx, "schedules")
	if code != 0 || strings.Count(out, "fleet: "+filter) != 2 || !strings.Contains(out, once.ID[:8]) || !strings.Contains(out, every.ID[:8]) {
		t.Fatalf("schedules: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ = e.run(ctx, "schedules", "-job", "fl-web"); code != 0 || !strings.Contains(out, `No schedules of job "fl-web"`) {
		t.Fatalf("schedules -job fl-web: exit %d\n%s", code, out)
	}
	code, out, errOut = e.run(ctx, "unschedule", once.ID[:8])
	if code != 0 || !strings.Contains(out, "of the fleet of -namespace 'default' -jobs '"+filter+"' removed") {
		t.Fatalf("unschedule: exit %d\n%s\n%s", code, out, errOut)
	}
	if left, err := ss.List(ctx, "*", ""); err != nil || len(left) != 1 || left[0].ID != every.ID {
		t.Fatalf("schedules after unschedule: %v, %v", left, err)
	}
	assertMainRestarted(t, c, "fl-web", 0)
}
