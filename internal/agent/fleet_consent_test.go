package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// defaultOnlyWriter may write nomad-restart's variables in namespace default and nothing
// else: whoever may file fleets and schedules there, but has no say over namespace prod.
const defaultOnlyWriter = `
namespace "default" {
  capabilities = ["list-jobs", "read-job"]
  variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } }
}`

// startConsentEnv is an env with ACLs, namespace prod, and a client whose token holds
// defaultOnlyWriter.
func startConsentEnv(t *testing.T) (*fleetEnv, *api.Client) {
	t.Helper()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	if _, err := e.client.Namespaces().Register(&api.Namespace{Name: "prod"}, nil); err != nil {
		t.Fatal(err)
	}
	token, err := e.sim.CreateToken("default-writer", map[string]string{"default-writer": defaultOnlyWriter})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := e.sim.APIClient(token)
	if err != nil {
		t.Fatal(err)
	}
	return &fleetEnv{env: e, fleets: store.NewNomadFleets(e.client, store.NomadOptions{})}, writer
}

// checkNotRestarted asserts, from Nomad's task events, that no allocation of the job was
// restarted or replaced.
func (e *fleetEnv) checkNotRestarted(t *testing.T, ns, job string) {
	t.Helper()
	counts, err := simtest.CountRestarts(testContext(t), e.client, ns, job)
	if err != nil || len(counts.InPlace) != 0 || len(counts.Replaced) != 0 {
		t.Errorf("job %s of namespace %s was restarted: %v (%v)", job, ns, counts, err)
	}
}

// A fleet record written by hand in default, with a token that may write variables there
// only, lists a job of prod beside one of default. The agent (deploy/agent-policy.hcl, which
// may restart anything) restarts default's job, fails prod's naming the missing member
// marker and the fix, and restarts no allocation of prod nor files a restart there.
func TestFleetWithoutMemberMarkerLeavesOtherNamespaceAlone(t *testing.T) {
	t.Parallel()
	e, writer := startConsentEnv(t)
	e.register(t, "default", "home-web", 1, nil)
	e.register(t, "prod", "prod-db", 2, nil)

	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.MaxFailedJobs, opts.OnError = 2, 1, restart.OnErrorFail
	spec := restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}}
	jobs := []fleet.Job{
		{Namespace: "default", JobID: "home-web", Type: "service", Priority: 50, Status: fleet.JobPending},
		{Namespace: "prod", JobID: "prod-db", Type: "service", Priority: 50, Status: fleet.JobPending},
	}
	sel := fleet.Selection{Namespace: "*", Filter: `Name matches "-"`}
	rec := fleetrun.NewRecord(uuid.NewString(), "default", sel, spec, opts, jobs, e.client.Address(), time.Now())
	if err := store.NewNomadFleets(writer, store.NomadOptions{}).Create(testContext(t), rec); err != nil {
		t.Fatalf("the default-only writer files the fleet: %v", err)
	}

	start(t, e.newAgent(t, "agent", e.shippedToken(t, "agent"), nil))
	final := e.waitFleetEnd(t, rec)
	for _, j := range final.Jobs {
		t.Logf("job %s/%s: %s (%s)", j.Namespace, j.JobID, j.Status, j.Reason)
		switch j.Namespace {
		case "default":
			if j.Status != fleet.JobSucceeded {
				t.Errorf("the home namespace's job %s ended %s, want succeeded", j.JobID, j.Status)
			}
		case "prod":
			marker := "nomad-restart/~fleets/" + rec.ID + "/member"
			if j.Status != fleet.JobFailed || j.RestartID != "" || strings.Contains(j.Reason, "\n") ||
				!strings.Contains(j.Reason, marker) || !strings.Contains(j.Reason, `namespace "prod" holds no member marker`) ||
				!strings.Contains(j.Reason, `token that may write nomad-restart variables in namespace "prod"`) {
				t.Errorf("prod's job ended %s with restart %q and reason %q; want failed, no restart, one line naming %s and the fix", j.Status, j.RestartID, j.Reason, marker)
			}
		}
	}
	e.checkNotRestarted(t, "prod", "prod-db")
	if recs, err := e.store.List(testContext(t), store.Filter{Namespace: "prod"}); err != nil || len(recs) != 0 {
		t.Errorf("restarts filed in prod: %d (%v)", len(recs), err)
	}
}

// consentSchedule stores, with client's token, a fleet schedule in default selecting jobs of
// every namespace by filter, due once at due.
func (e *fleetEnv) consentSchedule(t *testing.T, client *api.Client, filter string, due time.Time) *schedule.Schedule {
	t.Helper()
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.OnError = 2, restart.OnErrorFail
	sc := &schedule.Schedule{At: due, Next: due, Grace: time.Hour, Namespace: "default",
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "*", Filter: filter}, Options: opts}}
	sc.SetSpec(restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}})
	if err := schedule.NewStore(client, "").Create(testContext(t), sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// Two '*' fleet schedules in default: one stored by a token with rights in default only
// (no member marker in prod), one whose creator also wrote its marker in prod. At their
// occurrence the agent restarts only default's job of the first, saying in the fleet's
// first event that prod was left out and why, and both jobs of the second.
func TestScheduleFleetKeepsOnlyConsentingNamespaces(t *testing.T) {
	t.Parallel()
	e, writer := startConsentEnv(t)
	for _, ns := range []string{"default", "prod"} {
		e.register(t, ns, "a-"+ns, 1, nil)
		e.register(t, ns, "b-"+ns, 1, nil)
	}
	due := e.sim.Now().Add(20 * time.Second)
	weak := e.consentSchedule(t, writer, `Name matches "^a-"`, due)
	full := e.consentSchedule(t, e.client, `Name matches "^b-"`, due)
	if err := e.schedules().PutMember(testContext(t), "prod", full.ID, schedule.MemberOf(full)); err != nil {
		t.Fatal(err)
	}
	if err := schedule.NewStore(writer, "").PutMember(testContext(t), "prod", weak.ID, schedule.MemberOf(weak)); err == nil {
		t.Fatal("the default-only writer wrote a schedule's member marker in prod")
	}

	start(t, e.newAgent(t, "agent", e.shippedToken(t, "agent"), simClock(e.env)))
	for _, tc := range []struct {
		sc   *schedule.Schedule
		want []string
	}{{weak, []string{"a-default"}}, {full, []string{"b-default", "b-prod"}}} {
		got := e.waitScheduleDone(t, tc.sc)
		if got.LastResult != schedule.ResultStarted {
			t.Fatalf("schedule %s: %s (%s), want a started fleet", short(tc.sc.ID), got.LastResult, got.LastReason)
		}
		rec, err := e.fleets.Get(testContext(t), "default", got.LastRestartID)
		if err != nil {
			t.Fatal(err)
		}
		final := e.waitFleetEnd(t, rec)
		var ids []string
		for _, j := range final.Jobs {
			ids = append(ids, j.JobID)
		}
		if strings.Join(ids, ",") != strings.Join(tc.want, ",") || final.Status != restart.StatusSucceeded {
			t.Errorf("schedule %s's fleet restarted %v and ended %s; want %v, succeeded", short(tc.sc.ID), ids, final.Status, tc.want)
		}
		first := final.Events[0].Message
		t.Logf("schedule %s's fleet: %s", short(tc.sc.ID), first)
		leftOut := strings.Contains(first, `left out the jobs of namespace "prod"`) && strings.Contains(first, "no member marker")
		if leftOut != (tc.sc == weak) {
			t.Errorf("schedule %s's fleet's first event says prod was left out: %v, want %v", short(tc.sc.ID), leftOut, tc.sc == weak)
		}
		if tc.sc == full {
			if _, err := e.fleets.Member(testContext(t), "prod", rec.ID); err != nil {
				t.Errorf("the agent did not write the fleet's member marker in prod: %v", err)
			}
		}
	}
	e.checkNotRestarted(t, "prod", "a-prod")
	counts, err := simtest.CountRestarts(testContext(t), e.client, "prod", "b-prod")
	if err != nil || len(counts.InPlace)+len(counts.Replaced) != 1 {
		t.Errorf("b-prod, whose namespace consented, restarts: %v (%v), want one", counts, err)
	}
}
