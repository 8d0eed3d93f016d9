package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// TestFleetIDs checks how commands resolve IDs among restarts and fleets: a prefix
// matching both is ambiguous, a longer one picks the fleet; attach follows a fleet to its
// end; answer refuses a fleet with nothing to answer; a child restart is steered alone.
func TestFleetIDs(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "id", 2, 2)
	id, _ := detachFleet(t, ctx, e, "id", "-on-error=fail")

	// A restart in the local store whose ID shares the fleet's first 4 characters.
	twin := id[:4] + "0000-0000-4000-8000-000000000000"
	if twin[:8] == id {
		twin = id[:4] + "1111-0000-4000-8000-000000000000"
	}
	rec := &restart.Record{ID: twin, Namespace: "default", JobID: "elsewhere", Status: restart.StatusPending, CreateTime: time.Now()}
	if err := e.localStore(t).Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := e.run(ctx, "status", id[:4]); code != 1 || !strings.Contains(errOut, "matches restart "+twin[:8]+" and fleet "+id) {
		t.Errorf("status of a prefix of both: exit %d: %s", code, errOut)
	}
	if code, out, _ := e.run(ctx, "status", id); code != 0 || !strings.Contains(out, "Kind        = fleet") || !strings.Contains(out, "2 selected: 0 done, 0 running, 2 pending") {
		t.Errorf("status of the fleet: exit %d\n%s", code, out)
	}
	if code, _, errOut := e.run(ctx, "answer", id, "yes"); code != 1 || !strings.Contains(errOut, "is not waiting for an answer") {
		t.Errorf("answer to a fleet with no question: exit %d: %s", code, errOut)
	}

	// Ctrl-C stops the viewer only, and says that no process drives the fleet.
	viewCtx, stopViewing := context.WithCancel(ctx)
	var viewOut simtest.SyncBuffer
	viewer := goRun(func() (int, string, string) {
		var errb simtest.SyncBuffer
		code := e.app(&viewOut, &errb).run(viewCtx, []string{"attach", id})
		return code, viewOut.String(), errb.String()
	})
	simtest.WaitFor(t, ctx, "attach to follow the fleet", func() bool { return strings.Contains(viewOut.String(), "No process drives this fleet now") })
	stopViewing()
	if r := <-viewer; r.code != 1 || !strings.Contains(r.err, "Stopped following fleet "+id+"; no process drives it now") {
		t.Errorf("attach stopped: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	attached := e.start(ctx, "attach", id)
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	r := <-attached
	t.Logf("attach:\n%s\n%s", r.out, r.err)
	if r.code != 0 || !strings.Contains(r.out, "Attached to fleet "+id) || !strings.Contains(r.out, "Fleet restarted 2 jobs successfully!") || !strings.Contains(r.out, "[id-1] ") {
		t.Fatalf("attach: exit %d", r.code)
	}
	f := fleetOf(t, ctx, e, id)
	checkFleetOnce(t, ctx, c, e, f)

	// A child is a restart of its own: its ID works alone, and says its fleet.
	child := f.Jobs[0].RestartID[:8]
	if code, out, _ := e.run(ctx, "status", child); code != 0 || !strings.Contains(out, "Fleet") || !strings.Contains(out, "succeeded") {
		t.Errorf("status of a child: exit %d\n%s", code, out)
	}
	if code, _, errOut := e.run(ctx, "cancel", child); code != 1 || !strings.Contains(errOut, "restart "+child) || !strings.Contains(errOut, "already ended") {
		t.Errorf("cancel of an ended child: exit %d: %s", code, errOut)
	}
}

// app is an invocation of the command line on e, off a terminal, writing to out and errOut
// (which a test may read while the command runs).
func (e cliEnv) app(out, errOut *simtest.SyncBuffer) *app {
	env := map[string]string{"NOMAD_ADDR": e.addr, "NOMAD_TOKEN": e.token, "USER": "tester", "CONSUL_HTTP_ADDR": "http://127.0.0.1:1"}
	a := newApp(strings.NewReader(""), out, errOut, func(k string) string { return env[k] })
	a.backend = nomadBackend{localDir: e.localDir, clock: e.clock, timeScale: e.scale}
	return a
}

// TestLocalRecordOfAnotherCluster: a local record filed against another Nomad address is not
// listed, and resume refuses it with one line naming its cluster.
func TestLocalRecordOfAnotherCluster(t *testing.T) {
	_, e, ctx := startWebEnv(t, 1)
	local := e.localStore(t)
	other := "http://nomad.elsewhere:4646"
	rec := storetest.NewRecord("default", "web", 1)
	if err := store.ScopeToCluster(local, other).Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	id := rec.ID[:8]
	if code, out, errOut := e.run(ctx, "status"); strings.Contains(out, id) {
		t.Fatalf("status lists another cluster's restart: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 1 || !strings.Contains(errOut, "belongs to the Nomad cluster at "+other) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("resume of another cluster's restart: exit %d, want 1 and one line\n%s\n%s", code, out, errOut)
	}
	got, err := local.Get(context.Background(), rec.Namespace, rec.ID)
	if err != nil || got.Status != rec.Status || got.ModifyIndex != rec.ModifyIndex {
		t.Fatalf("the refused resume changed the record: %v %+v", err, got)
	}
	// Seen from its own cluster it is there.
	if recs, err := store.ScopeToCluster(local, other).List(context.Background(), store.Filter{}); err != nil || len(recs) != 1 {
		t.Fatalf("List from its own cluster: %d records, %v", len(recs), err)
	}
}
