package cli

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/notify/notifytest"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestRunNotifiesAndStatusShowsIt: run -notify sends what -notify-on asks for to a
// webhook named by a flag, by the environment and by a Nomad Variable, before it exits,
// and says what a failing sink left unsent; status shows the notifications sent; no
// output shows a sink's URL whole.
func TestRunNotifiesAndStatusShowsIt(t *testing.T) {
	sim, e, ctx := startWebEnv(t, 2)
	byFlag, byEnv, byVar := notifytest.NewReceiver(t, notifytest.Answer{}), notifytest.NewReceiver(t, notifytest.Answer{}), notifytest.NewReceiver(t, notifytest.Answer{})
	if _, _, err := adminClient(t, sim).Variables().Create(&api.Variable{Path: "nomad-restart/notify", Items: api.VariableItems{"hook": byVar.SecretURL()}}, nil); err != nil {
		t.Fatal(err)
	}
	down := notifytest.NewReceiver(t, notifytest.Answer{Status: http.StatusInternalServerError})
	e.env = map[string]string{"NOMAD_RESTART_NOTIFY_TEAM": byEnv.SecretURL()}
	code, out, errOut := e.run(ctx, "run", "-yes", "-batch-size", "1", "-notify", "ops="+byFlag.SecretURL(), "-notify", "down="+down.SecretURL(),
		"-notify", "vault=nomadvar://nomad-restart/notify#hook", "-notify-on", "started,succeeded=ops,team,vault", "web")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// The sink that fails delays run's exit by its last wait, and run says so.
	if !strings.Contains(errOut, "Warning: after waiting 5s, ") || !strings.Contains(errOut, "notification(s) to down still unsent") {
		t.Errorf("run does not say what it left unsent:\n%s", errOut)
	}
	for name, r := range map[string]*notifytest.Receiver{"flag": byFlag, "environment": byEnv, "variable": byVar} {
		if got := strings.Join(r.Triggers(), ","); got != "started,succeeded" {
			t.Errorf("the sink named by the %s heard %q, want started,succeeded", name, got)
		}
	}
	id, _ := createdID(t, out)
	code, status, statusErr := e.run(ctx, "status", id)
	if code != 0 || !strings.Contains(status, "Notifications (6 sent, 0 failed)") {
		t.Errorf("status (exit %d) does not show the notifications:\n%s\n%s", code, status, statusErr)
	}
	for _, s := range []string{out, errOut, status, statusErr} {
		if strings.Contains(s, notifytest.Secret) {
			t.Errorf("a sink's URL was shown whole:\n%s", s)
		}
	}
}

// TestNotifyFlagsRefuseBadInput: a bad -notify, -notify-on or -notify-min is one line
// naming the flag and the fix, exit 1, and nothing changed in the cluster.
func TestNotifyFlagsRefuseBadInput(t *testing.T) {
	sim, e, ctx := startWebEnv(t, 1)
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"invalid -notify", []string{"-notify", "ops"}},
		{"invalid -notify name", []string{"-notify", "Ops Team=https://x.example/" + notifytest.Secret}},
		{"invalid -notify https://x.example/…: name the sink", []string{"-notify", "https://x.example/hooks/" + notifytest.Secret}},
		{"invalid -notify https://x.example/…: name the sink", []string{"-notify", "https://x.example/hooks?token=" + notifytest.Secret}},
		{"unknown trigger \"restarted\"", []string{"-notify", "ops=https://x.example/" + notifytest.Secret, "-notify-on", "restarted=ops"}},
		{"invalid -notify-min", []string{"-notify-min", "loud"}},
		{"invalid nomadvar URL", []string{"-notify", "ops=nomadvar://nomad-restart/notify"}},
		{"needs an http(s) webhook URL", []string{"-notify", "ops=slack+ftp://x.example/" + notifytest.Secret}},
		{"not a URL shoutrrr can send to", []string{"-notify", "ops=nosuch://" + notifytest.Secret}},
		{"invalid -notify-page-url", []string{"-notify-page-url", "restarts.example.com"}},
	} {
		t.Run(tc.want, func(t *testing.T) {
			args := append([]string{"run", "-yes"}, tc.args...)
			runRefused(t, ctx, e, sim, true, tc.want, append(args, "web")...)
			if _, _, errOut := e.run(ctx, append(args, "web")...); strings.Contains(strings.ToLower(errOut), strings.ToLower(notifytest.Secret)) { // a name is read lower-cased
				t.Errorf("the refusal shows a sink's URL whole: %s", errOut)
			}
		})
	}
	// The agent's -notify-on names only its own sinks (a typo would leave the sink meant
	// hearing everything); bounded, so that an agent that starts fails the test, not hangs it.
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code, _, errOut := e.run(actx, "agent", "-http-addr", simtest.ClosedAddr(t), "-notify", "ops=https://x.example/"+notifytest.Secret, "-notify-on", "failed=opps")
	if code != 1 || !strings.Contains(errOut, `-notify-on names sink "opps", which no -notify gives`) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("agent -notify-on of a sink it lacks: exit %d, %q; want one line naming the sink", code, errOut)
	}
	code, _, errOut = e.run(ctx, "notify", "test", "-notify", "ops=nomadvar://nomad-restart/none#hook", "ops")
	if code != 1 || !strings.Contains(errOut, "reading Nomad variable nomad-restart/none") {
		t.Errorf("notify test of a missing variable: exit %d, %q", code, errOut)
	}
}

// TestNotifyTestSendsTheTestMessage: notify test sends one message to the sink named and
// says so; a sink that refuses it makes it exit 1 saying why, its URL never whole.
func TestNotifyTestSendsTheTestMessage(t *testing.T) {
	hook := notifytest.NewReceiver(t, notifytest.Answer{})
	e := cliEnv{localDir: t.TempDir()}
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "notify", "test", "-notify", "ops="+hook.SecretURL(), "ops")
	if code != 0 || !strings.Contains(out, "Sent a test notification to ops") || strings.Join(hook.Triggers(), ",") != "test" {
		t.Fatalf("exit %d, %q %q; the sink heard %v", code, out, errOut, hook.Triggers())
	}
	code, _, errOut = e.run(ctx, "notify", "test", "-notify", "ops=http://127.0.0.1:1/hooks/"+notifytest.Secret, "ops")
	if code != 1 || !strings.Contains(errOut, "was not delivered") || strings.Contains(errOut, notifytest.Secret) {
		t.Errorf("exit %d, %q: want a refusal without the URL", code, errOut)
	}
}

// TestNomadVarSinkNeedsTheAgentPolicy: a sink kept in nomad-restart-notify/ is read with
// the shipped agent policy, and refused to the operators' (one line naming the variable),
// with ACLs enforced.
func TestNomadVarSinkNeedsTheAgentPolicy(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	hook := notifytest.NewReceiver(t, notifytest.Answer{})
	admin := simtest.ClientAs(t, c, c.BootstrapToken())
	if _, _, err := admin.Variables().Create(&api.Variable{Path: "nomad-restart-notify/hooks", Items: api.VariableItems{"ops": hook.SecretURL()}}, nil); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	args := []string{"notify", "test", "-notify", "ops=nomadvar://nomad-restart-notify/hooks#ops", "ops"}
	e := newCLIEnv(t, c)
	e.token = agenttest.ShippedToken(t, c, "agent")
	if code, out, errOut := e.run(ctx, args...); code != 0 || strings.Join(hook.Triggers(), ",") != "test" {
		t.Fatalf("with the agent's policy: exit %d, %q %q; the sink heard %v", code, out, errOut, hook.Triggers())
	}
	e.token = agenttest.ShippedToken(t, c, "operator")
	code, _, errOut := e.run(ctx, args...)
	if code != 1 || !strings.Contains(errOut, "reading Nomad variable nomad-restart-notify/hooks") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("with the operators' policy: exit %d, %q; want one line naming the variable", code, errOut)
	}
}

// TestFleetNotifiesOnceForAllItsJobs: a fleet of many jobs tells its start and its end,
// with the jobs' counts, not one message per job.
func TestFleetNotifiesOnceForAllItsJobs(t *testing.T) {
	_, e, ctx := startFleetEnv(t, "fleet", 5, 1)
	hook := notifytest.NewReceiver(t, notifytest.Answer{})
	code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^fleet-"`, "-on-error", "fail", "-max-parallel-jobs", "2", "-notify", "ops="+hook.SecretURL(), "-notify-on", "fleet-started,fleet-finished,failed=ops")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if got := strings.Join(hook.Triggers(), ","); got != "fleet-started,fleet-finished" {
		t.Fatalf("the sink heard %q, want fleet-started,fleet-finished", got)
	}
	last := hook.Received()[1]
	progress, _ := last["progress"].(map[string]any)
	if last["kind"] != "fleet" || last["status"] != "succeeded" || progress["jobs"] != float64(5) || progress["succeeded"] != float64(5) {
		t.Errorf("the fleet's end says %v, %v, progress %v; want a fleet of 5 jobs succeeded", last["kind"], last["status"], progress)
	}
}

// TestAgentNotifiesAndCountsIt: the agent sends a detached restart's notifications to its
// sinks, with the page's link, and counts each in nomad_restart_notifications_total.
func TestAgentNotifiesAndCountsIt(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	register(t, c, testJob("web", "service"))
	e := newCLIEnv(t, c)
	ctx := testCtx(t)
	hook := notifytest.NewReceiver(t, notifytest.Answer{})
	a := startAgentCommand(t, ctx, map[string]string{"NOMAD_ADDR": c.Addr()},
		"-notify", "ops="+hook.SecretURL(), "-notify-on", "succeeded=ops", "-notify-page-url", "https://restarts.example.com")
	id, _ := e.runDetached(t, ctx, "-yes", "web")
	simtest.WaitFor(t, ctx, "the succeeded notification", func() bool { return len(hook.Triggers()) > 0 })
	if got := strings.Join(hook.Triggers(), ","); got != "succeeded" {
		t.Fatalf("the sink heard %q, want succeeded", got)
	}
	link := hook.Received()[0]["link"]
	if l, _ := link.(string); !strings.HasPrefix(l, "https://restarts.example.com/restart/"+id) {
		t.Errorf("link %v", link)
	}
	want := `nomad_restart_notifications_total{outcome="sent",sink="ops"} 1`
	simtest.WaitFor(t, ctx, "the notification counted", func() bool {
		return strings.Contains(agenttest.Get(t, "http://"+a.addr+"/metrics", http.StatusOK), want)
	})
	a.stopAndWait(t, ctx)
	if strings.Contains(a.errb.String(), notifytest.Secret) || !strings.Contains(a.errb.String(), "notifying") {
		t.Errorf("the agent's log shows a sink's URL whole, or not its sinks:\n%s", a.errb.String())
	}
}
