package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// operatorRules may list and restart jobs and keep nomad-restart's variables in each of
// namespaces.
func operatorRules(namespaces ...string) string {
	var b strings.Builder
	for _, ns := range namespaces {
		b.WriteString(`namespace "` + ns + `" { capabilities = ["list-jobs", "read-job", "alloc-lifecycle"]
  variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } } }
`)
	}
	return b.String()
}

// startMemberSim is a simulated Nomad with ACLs, namespace team-b, and jobs fa-0 in default
// and fb-0 in team-b.
func startMemberSim(t *testing.T) (*nomadsim.Cluster, *api.Client) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	admin := adminClient(t, c)
	if _, err := admin.Namespaces().Register(&api.Namespace{Name: "team-b"}, nil); err != nil {
		t.Fatal(err)
	}
	registerFleetJobs(t, c, "default", "fa", 1, 2)
	registerFleetJobs(t, c, "team-b", "fb", 1, 2)
	return c, admin
}

// A fleet across namespaces filed by a token with rights in both: the CLI writes the
// fleet's member marker in team-b (the namespace other than its home, default) before the
// fleet, naming team-b's job, and the fleet restarts the jobs of both namespaces.
func TestFleetMemberMarkerLetsBothNamespacesRestart(t *testing.T) {
	c, admin := startMemberSim(t)
	e := newCLIEnvAs(t, c, "both", operatorRules("default", "team-b"))
	ctx := testCtx(t)
	f, _ := runStarFleet(t, ctx, e)
	for _, j := range f.Jobs {
		if j.Status != fleet.JobSucceeded {
			t.Errorf("job %s/%s: %s", j.Namespace, j.JobID, j.Status)
		}
	}
	checkFleetOnce(t, ctx, c, e, f)
	fleets := nomadFleets(admin, 0)
	m, err := fleets.Member(ctx, "team-b", f.ID)
	if err != nil || m.Home != "default" || strings.Join(m.Jobs, ",") != "fb-0" {
		t.Errorf("the fleet's member marker in team-b: %+v, %v; want home default, jobs [fb-0]", m, err)
	}
	if _, err := fleets.Member(ctx, "default", f.ID); err == nil {
		t.Error("a member marker was written in the fleet's home, which needs none")
	}
}

// A '*' fleet schedule: with a token that may write variables in both namespaces the CLI
// writes the schedule's member marker in team-b; with a token that may list team-b's jobs
// but not write its variables it is refused in one line, and no schedule is stored.
func TestFleetScheduleMemberMarker(t *testing.T) {
	c, admin := startMemberSim(t)
	ctx := testCtx(t)
	at := c.Now().Add(time.Hour).UTC().Format(time.RFC3339)

	weakRules := operatorRules("default") + `namespace "team-b" { capabilities = ["list-jobs", "read-job"] }`
	e := newCLIEnvAs(t, c, "weak", weakRules)
	runRefused(t, ctx, e, nil, true, `recording the schedule's consent to restart its jobs of namespace "team-b"`,
		"run", "-namespace", "*", "-jobs", `Name matches "^f"`, "-at", at, "-on-error=fail")
	if all, _, err := admin.Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "*"}); err != nil || len(all) != 0 {
		t.Errorf("variables written by the refused schedule: %d (%v)", len(all), err)
	}

	e.token = simtest.Token(t, c, "both", operatorRules("default", "team-b"))
	code, out, errOut := e.run(ctx, "run", "-namespace", "*", "-jobs", `Name matches "^f"`, "-at", at, "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -jobs -at with rights in both namespaces: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	ss := nomadSchedules(admin)
	list, err := ss.List(ctx, "*", "")
	if err != nil || len(list) != 1 || list[0].Namespace != "default" {
		t.Fatalf("schedules: %d, %v; want one in default", len(list), err)
	}
	sc := list[0]
	if m, err := ss.Member(ctx, "team-b", sc.ID); err != nil || m != schedule.MemberOf(sc) {
		t.Errorf("the schedule's member marker in team-b: %+v, %v; want %+v", m, err, schedule.MemberOf(sc))
	}
	if _, err := ss.Member(ctx, "default", sc.ID); err == nil {
		t.Error("a schedule member marker was written in the schedule's home, which needs none")
	}

	code, out, errOut = e.run(ctx, "unschedule", sc.ID)
	if code != 0 {
		t.Fatalf("unschedule: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := ss.Member(ctx, "team-b", sc.ID); err == nil {
		t.Error("unschedule left the schedule's member marker in team-b")
	}
	if counts, err := simtest.CountRestarts(ctx, admin, "team-b", "fb-0"); err != nil || len(counts.InPlace) != 0 {
		t.Errorf("job fb-0 restarted by scheduling: %v (%v)", counts, err)
	}
}
