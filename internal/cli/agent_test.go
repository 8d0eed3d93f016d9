package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestAgentBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-concurrency=0"}, "-concurrency must be at least 1"},
		{[]string{"-state=disk"}, `Invalid -state value "disk"`},
		{[]string{"-log-format=xml"}, `Invalid -log-format value "xml"`},
		{[]string{"-http-addr=9646"}, `Invalid -http-addr value "9646"`},
		{[]string{"-bogus"}, "unknown option -bogus"},
		{[]string{"extra"}, "agent takes no arguments"},
		{[]string{"-log-level=loud"}, "Invalid -log-level value"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Run(context.Background(), append([]string{"agent"}, tc.args...), strings.NewReader(""), &out, &errb,
				func(string) string { return "" })
			if code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if got := strings.TrimSpace(errb.String()); !strings.Contains(got, tc.want) || strings.Count(got, "\n") != 0 {
				t.Errorf("stderr %q, want one line containing %q", got, tc.want)
			}
		})
	}
}

// `nomad-restart agent` adopts a detached restart, serves /healthz, and on cancellation
// (SIGTERM) exits 0.
func TestAgentCommandAdoptsDetachedRestart(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	register(t, c, testJob("web", "service"))
	client := simtest.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	e := engine.New(engine.Config{Cluster: cluster.NewNomad(client), Store: st})
	var p *engine.Plan
	simtest.WaitFor(t, ctx, "a plan (the job's deployment must end first)", func() bool {
		var err error
		p, err = e.Plan(ctx, engine.Request{Job: "web"})
		return err == nil
	})
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}

	a := startAgentCommand(t, ctx, map[string]string{
		"NOMAD_ADDR":      c.Addr(),
		"NOMAD_NAMESPACE": "not-the-agent-scope", // ignored by the agent (see its help)
	}, "-log-format", "json")
	rec := p.Record
	drivers := map[string]bool{} // every driver the record named while it ran
	for !rec.Status.Terminal() {
		next, err := st.Watch(ctx, rec.Namespace, rec.ID, rec.ModifyIndex)
		if err != nil {
			t.Fatalf("restart did not end: %v; agent stderr:\n%s", err, a.errb.String())
		}
		rec = next
		if rec.Driver != "" {
			drivers[rec.Driver] = true
		}
	}
	if rec.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", rec.Status, rec.Reason)
	}
	if rec.Driver != "" {
		t.Errorf("the ended restart still names a driver: %q", rec.Driver)
	}
	// The agent logs each restart it finished; the record's events name a driver that took over.
	agentDrove := strings.Contains(agenttest.EventLines(rec), "agent@") || strings.Contains(a.errb.String(), "restart finished")
	for d := range drivers {
		if !strings.HasPrefix(d, "agent@") {
			t.Errorf("the record named %q as its driver, not the agent", d)
		}
		agentDrove = true
	}
	if !agentDrove {
		t.Errorf("the record never named the agent as its driver")
	}
	simtest.WaitFor(t, ctx, "the agent's /healthz", func() bool {
		resp, err := http.Get("http://" + a.addr + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	a.stopAndWait(t, ctx)
	if !strings.Contains(a.errb.String(), `"msg":"agent started"`) {
		t.Errorf("no JSON log line of the start:\n%s", a.errb.String())
	}
}

// `nomad-restart agent` rolls an opted-in job when the variable its template reads
// changes (-roll-on-change is on by default): the rollout is an ordinary restart record,
// triggered by the change, driven to its end by the agent.
func TestAgentCommandRollsOnChange(t *testing.T) {
	t.Parallel()
	// Nomad's time is real time here, not simtest's 50 times faster: the debounce is a timer
	// of the agent's, on real time.
	c := simtest.Start(t, nomadsim.Options{TimeScale: 1})
	client := adminClient(t, c)
	path := "nomad/jobs/web/config"
	index := agenttest.PutVar(t, client, path, "hello", 0)
	job := testJob("web", api.JobTypeService)
	job.TaskGroups = job.TaskGroups[:1]
	register(t, c, agenttest.Templated(job, agenttest.GreetingTemplate(path), map[string]string{"nomad-restart.on-change": "auto", "nomad-restart.debounce": "2s"}))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := startAgentCommand(t, ctx, map[string]string{"NOMAD_ADDR": c.Addr()}, "-log-format", "json")
	simtest.WaitFor(t, ctx, "the agent to follow the job", func() bool {
		return strings.Contains(a.errb.String(), "following a job for config-change rollouts")
	})
	index = agenttest.PutVar(t, client, path, "bonjour", index)

	st := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "the rollout", func() bool {
		recs, err := st.List(ctx, store.Filter{JobID: "web"})
		if err == nil && len(recs) == 1 {
			rec = recs[0]
		}
		return rec != nil
	})
	for !rec.Status.Terminal() {
		var err error
		if rec, err = st.Watch(ctx, rec.Namespace, rec.ID, rec.ModifyIndex); err != nil {
			t.Fatalf("the rollout did not end: %v; agent stderr:\n%s", err, a.errb.String())
		}
	}
	if rec.Status != restart.StatusSucceeded || len(rec.Triggers) != 1 || rec.Triggers[0].NewIndex != index {
		t.Fatalf("the rollout ended %s (%s) with triggers %+v, want succeeded for the change to index %d", rec.Status, rec.Reason, rec.Triggers, index)
	}
	a.stopAndWait(t, ctx)
}

// The page of `nomad-restart agent` acts with the token of the request only: with none, an
// agent whose own token (NOMAD_TOKEN, the agent policy) may write the records still cannot
// pause a restart through it; with an operator token it can; neither token is logged.
func TestAgentPageActsWithTheRequestsToken(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	register(t, c, testJob("web", "service"))
	admin := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := nomadstore.NewRestarts(nomadvars.New(admin, nomadvars.Options{}), nomadstore.Options{})
	e := engine.New(engine.Config{Cluster: cluster.NewNomad(admin), Store: st})
	p, err := e.Plan(ctx, engine.Request{Job: "web", Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}
	agentToken, operator := agenttest.ShippedToken(t, c, "agent"), agenttest.ShippedToken(t, c, "operator")

	a := startAgentCommand(t, ctx, map[string]string{"NOMAD_ADDR": c.Addr(), "NOMAD_TOKEN": agentToken}, "-log-format", "json", "-log-level", "debug")
	rec := p.Record
	for rec.Status != restart.StatusWaiting {
		if rec, err = st.Watch(ctx, rec.Namespace, rec.ID, rec.ModifyIndex); err != nil {
			t.Fatalf("the agent did not take the restart to its question: %v; stderr:\n%s", err, a.errb.String())
		}
	}

	pause := func(token string) (int, string) {
		headers := map[string]string{"Sec-Fetch-Site": "same-origin"}
		if token != "" {
			headers["X-Nomad-Token"] = token
		}
		return agenttest.Post(t, "http://"+a.addr+"/restart/"+rec.ID+"/pause", headers, "{}")
	}
	if code, body := pause(""); code != http.StatusForbidden || !strings.Contains(body, "Permission denied") {
		t.Errorf("pause without a token: %d %s, want a denial (the agent's own token must not act for the page)", code, body)
	}
	if code, body := pause(operator); code != http.StatusOK {
		t.Errorf("pause with the operator policy: %d %s", code, body)
	}
	paused, err := st.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.Control.Intent != restart.IntentPause {
		t.Errorf("after the operator's pause the intent is %q", paused.Control.Intent)
	}
	a.stopAndWait(t, ctx)
	logs := a.errb.String()
	if !strings.Contains(logs, "action from the page") {
		t.Errorf("the agent did not log the page's actions:\n%s", logs)
	}
	for _, secret := range []string{agentToken, operator} {
		if strings.Contains(logs+a.out.String(), secret) {
			t.Errorf("a token appears in the agent's output")
		}
	}
}

// runningAgent is `nomad-restart agent` running in the test's process, its page at addr.
type runningAgent struct {
	addr      string
	out, errb simtest.SyncBuffer
	done      chan int
	stop      context.CancelFunc
}

// startAgentCommand runs `nomad-restart agent -http-addr <a free address> args...` until
// ctx ends or stopAndWait, with the environment env (what it lacks is unset).
func startAgentCommand(t *testing.T, ctx context.Context, env map[string]string, args ...string) *runningAgent {
	t.Helper()
	agentCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	a := &runningAgent{addr: simtest.ClosedAddr(t), done: make(chan int, 1), stop: stop}
	go func() {
		a.done <- Run(agentCtx, append([]string{"agent", "-http-addr", a.addr}, args...), strings.NewReader(""), &a.out, &a.errb,
			func(k string) string { return env[k] })
	}()
	return a
}

// stopAndWait cancels the agent, as SIGTERM does, and checks that it exits 0.
func (a *runningAgent) stopAndWait(t *testing.T, ctx context.Context) {
	t.Helper()
	a.stop()
	select {
	case code := <-a.done:
		if code != 0 {
			t.Errorf("agent exited %d; stderr:\n%s", code, a.errb.String())
		}
	case <-ctx.Done():
		t.Fatal("agent did not exit after cancellation")
	}
}
