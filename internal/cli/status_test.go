package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestStatusShowsSurge: `status <id>` of a -surge restart shows each group's surge between
// the allocations and the events, and `status -json <id>` holds it; a restart without
// -surge shows no surge section.
func TestStatusShowsSurge(t *testing.T) {
	_, e, ctx := startWebEnv(t, 1)
	code, out, errOut := e.run(ctx, "run", "-on-error=fail", "-state=local", "-surge=1", "web")
	if code != 0 {
		t.Fatalf("run -surge: exit %d\n%s\n%s", code, out, errOut)
	}
	id, _ := createdID(t, out)

	code, out, errOut = e.run(ctx, "status", id)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	allocs, surge, events := strings.Index(out, "\nAllocations\n"), strings.Index(out, "\nSurge\n"), strings.Index(out, "\nRecent Events\n")
	if allocs < 0 || surge < allocs || events < surge {
		t.Fatalf("status: want the sections Allocations, Surge, Recent Events in that order:\n%s", out)
	}
	section := out[surge:events]
	for _, re := range []string{`(?m)^Group\s+From\s+To\s+Phase\s+Note$`, `(?m)^web\s+1\s+2\s+down\s+-$`} {
		if !regexp.MustCompile(re).MatchString(section) {
			t.Errorf("surge section lacks %s:\n%s", re, section)
		}
	}

	code, out, errOut = e.run(ctx, "status", "-json", id)
	if code != 0 {
		t.Fatalf("status -json: exit %d\n%s\n%s", code, out, errOut)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	var groups []restart.SurgeGroup
	if err := json.Unmarshal(raw["Surge"], &groups); err != nil {
		t.Fatalf("status -json Surge %s: %v", raw["Surge"], err)
	}
	if len(groups) != 1 || groups[0].Group != "web" || groups[0].From != 1 || groups[0].To != 2 || groups[0].Phase != restart.SurgeDown {
		t.Errorf("status -json Surge %+v, want web 1->2 down", groups)
	}

	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "web")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	plain, _ := createdID(t, out)
	if _, out, _ = e.run(ctx, "status", plain); strings.Contains(out, "\nSurge\n") || !strings.Contains(out, "\nRecent Events\n") {
		t.Errorf("status of a restart without -surge shows a surge section:\n%s", out)
	}
	if _, out, _ = e.run(ctx, "status", "-json", plain); strings.Contains(out, `"Surge"`) {
		t.Errorf("status -json of a restart without -surge has a Surge field:\n%s", out)
	}
}

// TestPrintSurgeNotes: the surge section shows each group's phase and its note on one line,
// IDs shortened unless -verbose.
func TestPrintSurgeNotes(t *testing.T) {
	const id = "0b1e3c52-8f2a-4d6e-9c41-7a5b2e9f1d30"
	note := "could not scale group \"api\" back to 2 (Permission denied)\nrestore it with `nomad job scale` for restart " + id
	surge := []restart.SurgeGroup{
		{Group: "web", From: 1, To: 2, Phase: restart.SurgeUp},
		{Group: "api", From: 2, To: 3, Phase: restart.SurgeLeft, Note: note},
	}
	cases := []struct {
		name    string
		verbose bool
		want    []string
	}{
		{name: "short IDs", want: []string{
			`(?m)^web\s+1\s+2\s+up\s+-$`,
			`(?m)^api\s+2\s+3\s+left\s+could not scale group "api" back to 2 \(Permission denied\) restore it with ` + "`nomad job scale`" + ` for restart 0b1e3c52$`}},
		{name: "verbose", verbose: true, want: []string{`(?m)for restart ` + id + `$`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb simtest.SyncBuffer
			a := newApp(strings.NewReader(""), &out, &errb, func(string) string { return "" })
			printSurge(&out, a.printer(tc.verbose, false), surge)
			for _, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(out.String()) {
					t.Errorf("surge section lacks %s:\n%s", re, out.String())
				}
			}
			if n := strings.Count(out.String(), "\n"); n != 3+len(surge) {
				t.Errorf("%d lines, want %d (blank, title, header, one per group):\n%s", n, 3+len(surge), out.String())
			}
		})
	}
}

// A config-change rollout's record names what triggered it, and its options say which
// allocations it keeps (those whose tasks started before the change).
func TestStatusShowsTriggers(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	a := newApp(strings.NewReader(""), &out, &out, func(string) string { return "" })
	a.now = func() time.Time { return at.Add(time.Minute) }
	rec := &restart.Record{ID: "0b0c3e52-7a3f-4a55-9d3e-2f4c6a1b9e10", JobID: "web", Namespace: "default",
		Status: restart.StatusRunning, Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, StartedBefore: at},
		Triggers: []restart.Trigger{
			{Source: "nomad:nomad/jobs/web/config", OldIndex: 7, NewIndex: 9, ChangedAt: at.Add(-time.Minute)},
			{Source: "consul:web/config@dc1", OldIndex: 40, NewIndex: 41, ChangedAt: at},
		}}
	a.printRecord(rec, "nomad", false, leaseHeld)
	for _, want := range []string{
		"Triggered By = nomad:nomad/jobs/web/config changed (index 7 → 9) at 2026-12-01T11:59:00Z",
		"Triggered By = consul:web/config@dc1 changed (index 40 → 41) at 2026-12-01T12:00:00Z",
		"started-before=2026-12-01T12:00:00Z",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// A revert's record names the failed rollout and what it wrote back: the source, where the
// value was kept and the indexes, never the value.
func TestStatusShowsARevert(t *testing.T) {
	var out bytes.Buffer
	a := newApp(strings.NewReader(""), &out, &out, func(string) string { return "" })
	rec := &restart.Record{ID: "0b0c3e52-7a3f-4a55-9d3e-2f4c6a1b9e10", JobID: "web", Namespace: "default", Status: restart.StatusSucceeded,
		Revert: &restart.Revert{Rollout: "5d1e6f2a-1111-4a55-9d3e-2f4c6a1b9e10", Writes: []restart.RevertWrite{
			{Source: "nomad:nomad/jobs/web/config", KeptPath: "nomad-restart/~kept/x", BadIndex: 12, WrittenIndex: 15}}}}
	a.printRecord(rec, "nomad", false, leaseHeld)
	for _, want := range []string{
		"Reverts      = rollout 5d1e6f2a, which failed (`nomad-restart status 5d1e6f2a`)",
		"Written Back = nomad:nomad/jobs/web/config from nomad-restart/~kept/x, check-and-set on index 12, now index 15",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	return "http://" + simtest.ClosedAddr(t)
}

// TestStatusNomadUnreachable: status warns that Nomad could not be read and lists the local
// records it has; with none, it exits 1 with Nomad's failure in one line.
func TestStatusNomadUnreachable(t *testing.T) {
	ctx := testCtx(t)
	e := cliEnv{addr: closedAddr(t), localDir: t.TempDir()}
	code, out, errOut := e.run(ctx, "status")
	if code != 1 || !strings.HasPrefix(errOut, "cannot reach Nomad at "+e.addr) || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("status with nothing readable: exit %d, want 1 and one line: Nomad's failure\n%s\n%s", code, out, errOut)
	}

	// A record of this cluster in the local store is still listed, with the warning, exit 0.
	if err := store.ScopeToCluster(e.localStore(t), store.ClusterName(e.addr)).Create(ctx, storetest.NewRecord("default", "web", 1)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = e.run(context.WithoutCancel(ctx), "status")
	if code != 0 || !strings.Contains(out, "web") || !strings.Contains(errOut, "could not be read") {
		t.Fatalf("status with local records: exit %d, want 0 with the record and a warning\n%s\n%s", code, out, errOut)
	}
}

// TestFleetStatusJSON checks the shape of `status -json` with a fleet: fleets beside
// restarts, each entry with its Kind, a fleet's Jobs with their restarts once started.
func TestFleetStatusJSON(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "sj", 2, 1)
	register(t, c, simpleJob("solo", api.JobTypeService, 1))
	ctx := testCtx(t)
	if code, out, errOut := e.run(ctx, "run", "-on-error=fail", "solo"); code != 0 {
		t.Fatalf("run solo: exit %d\n%s\n%s", code, out, errOut)
	}
	pendingID, _ := detachFleet(t, ctx, e, "sj")
	code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^sj-"`, "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -jobs: exit %d\n%s\n%s", code, out, errOut)
	}
	doneID := fleetIDIn(t, out)

	code, out, _ = e.run(ctx, "status", "-json")
	var list []statusEntry
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("status -json: exit %d, %v\n%s", code, err, out)
	}
	kinds := map[string]int{}
	for _, en := range list {
		kinds[en.Kind]++
		switch {
		case en.Kind == "fleet" && strings.HasPrefix(en.ID, pendingID):
			if en.Status != "pending" || len(en.Jobs) != 2 || en.Jobs[0].RestartID != "" || en.Jobs[0].Status != "pending" || en.Jobs[0].Namespace != "default" {
				t.Errorf("detached fleet entry: %+v", en)
			}
		case en.Kind == "fleet" && strings.HasPrefix(en.ID, doneID):
			if en.Status != "succeeded" || len(en.Jobs) != 2 || en.Jobs[1].JobID != "sj-1" || en.Jobs[1].RestartID == "" || en.Jobs[1].Status != "succeeded" {
				t.Errorf("driven fleet entry: %+v", en)
			}
		case en.Kind != "restart":
			t.Errorf("entry of kind %q: %+v", en.Kind, en)
		}
	}
	if kinds["fleet"] != 2 || kinds["restart"] != 3 {
		t.Errorf("status -json lists %v, want 2 fleets and 3 restarts (solo and the driven fleet's 2)", kinds)
	}
	// A listing of one job's restarts lists restarts only, as before.
	code, out, _ = e.run(ctx, "status", "-json", "-job=solo")
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 || list[0].Kind != "restart" {
		t.Errorf("status -json -job=solo: exit %d, %v: %s", code, err, out)
	}
	code, out, _ = e.run(ctx, "status")
	if code != 0 || !strings.Contains(out, "\nFleets\n") || !strings.Contains(out, pendingID) || !strings.Contains(out, "2/2 done") {
		t.Errorf("status: exit %d, want the fleets' table\n%s", code, out)
	}

	// -detach -json prints the fleet's events, then its record (as for a restart); a cancel of a fleet no one drives ends it at once.
	code, out, errOut = e.run(ctx, "run", "-detach", "-json", "-jobs", `Name matches "^sj-"`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var detached fleetJSON
	if code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &detached) != nil || detached.Kind != "fleet" || detached.Status != restart.StatusPending {
		t.Fatalf("run -detach -json: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := e.run(ctx, "cancel", detached.ID[:8]); code != 0 || !strings.Contains(out, "status: canceled") {
		t.Errorf("cancel of an undriven fleet: exit %d\n%s\n%s", code, out, errOut)
	}
	if f := fleetOf(t, ctx, e, detached.ID); f.Status != restart.StatusCanceled || f.Counts()[fleet.JobCanceled] != 2 {
		t.Errorf("canceled fleet: %s %v", f.Status, f.Counts())
	}
}

// TestAttachFollowsToTheEnd: attach shows a restart as status does, but live: it follows
// a detached restart that another command drives to its end, and prints an ended one with
// its result.
func TestAttachFollowsToTheEnd(t *testing.T) {
	_, e, ctx := startWebEnv(t, 3)
	id, _ := e.runDetached(t, ctx, "web")

	attached := e.start(ctx, "attach", id)
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", code, out, errOut)
	}
	r := <-attached
	if r.code != 0 {
		t.Fatalf("attach: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, s := range []string{"Attached to restart " + id, "Restarting 3 allocations", "Job restart finished", "Job restarted successfully!"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("attach output lacks %q:\n%s", s, r.out)
		}
	}
	// attach on an ended restart prints it and exits with its result.
	code, out, _ = e.run(ctx, "attach", id)
	if code != 0 || !strings.Contains(out, "Job restart finished") {
		t.Fatalf("attach after the end: %d\n%s", code, out)
	}
}

// TestAttachCtrlCStopsOnlyTheViewer checks that interrupting attach leaves the restart alone.
func TestAttachCtrlCStopsOnlyTheViewer(t *testing.T) {
	_, e, ctx := startWebEnv(t, 2)
	id, _ := e.runDetached(t, ctx, "web")
	code, _, errOut := attachUntil(t, ctx, e, id, "No process drives this restart")
	if code != 1 || !strings.Contains(errOut, "Stopped following restart "+id) {
		t.Fatalf("attach interrupted: exit %d: %s", code, errOut)
	}
	if rec := statusOf(t, ctx, e, id); rec.Status != restart.StatusPending {
		t.Fatalf("the viewer changed the restart: %s", rec.Status)
	}
}

// TestAttachToOrphanSaysNobodyDrives: a viewer leaving a restart nobody drives does not claim
// that it goes on.
func TestAttachToOrphanSaysNobodyDrives(t *testing.T) {
	c, e, ctx := startWebEnv(t, 1)
	id, _ := e.runDetached(t, ctx, "web")
	// Its driver wrote its name, then died.
	st, rec := findInNomad(t, ctx, adminClient(t, c), id, 0)
	if _, err := store.Mutate(ctx, st, rec.Namespace, rec.ID, func(r *restart.Record) error { r.Driver = "dead@host"; return nil }); err != nil {
		t.Fatal(err)
	}
	// The lease's probe may take a while on a loaded machine: the viewer is stopped once it
	// said so.
	code, out, errOut := attachUntil(t, ctx, e, id, "was driven by dead@host, but no process drives it now")
	if code != 1 || !strings.Contains(errOut, "no process drives it now") || strings.Contains(errOut, "goes on without this viewer") {
		t.Fatalf("attach to an orphan, stopped: exit %d\n%s\n%s", code, out, errOut)
	}
}

// attachUntil runs `attach id` until its output says want, then stops it as Ctrl-C does,
// and returns its exit code and output.
func attachUntil(t *testing.T, ctx context.Context, e cliEnv, id, want string) (code int, out, errOut string) {
	t.Helper()
	actx, stop := context.WithCancel(ctx)
	defer stop()
	var aout, aerr simtest.SyncBuffer
	a := newApp(strings.NewReader(""), &aout, &aerr, func(k string) string { return map[string]string{"NOMAD_ADDR": e.addr}[k] })
	a.backend = nomadBackend{localDir: e.localDir}
	done := make(chan int, 1)
	go func() { done <- a.run(actx, []string{"attach", id}) }()
	simtest.WaitFor(t, ctx, "attach to say "+want, func() bool { return strings.Contains(aout.String(), want) })
	stop()
	return <-done, aout.String(), aerr.String()
}
