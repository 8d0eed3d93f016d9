package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
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
	st := nomadRestarts(client)
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

	st := nomadRestarts(client)
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
	st := nomadRestarts(admin)
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

// besideAnAgent slows the writes of variables on c as a real cluster's Raft does (a round
// trip among the servers: it takes longer than a read, which gives an agent's listing time
// to see a record between two writes of its creator) and starts an eager agent on it: the
// command line's environment, a context bounding the test, and the agent's metrics.
func besideAnAgent(t *testing.T, c *nomadsim.Cluster) (cliEnv, context.Context, string) {
	t.Helper()
	c.SetFault(nomadsim.Fault{Method: http.MethodPut, Path: "/v1/var/", Latency: 20 * time.Millisecond})
	e := newCLIEnv(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return e, ctx, startEagerAgent(t, c)
}

// With an agent running, as the docs recommend, every `run` in the foreground drives the
// restart it files from its first write: the agent, which adopts the restarts no process
// drives, never takes one up, so no pipeline's `run` ends "driven by another process".
// `run -detach` still leaves its restart to the agent.
func TestRunBesideAnAgentDrivesItsOwnRestart(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	jobs := []string{"api", "web"}
	for _, j := range jobs {
		register(t, c, simpleJob(j, api.JobTypeService, 1))
	}
	e, ctx, metrics := besideAnAgent(t, c)

	// 50 runs in all: each job's one after the other (a job has one restart at a time),
	// the two jobs' side by side.
	const runsPerJob = 25
	simtest.Concurrently(t, len(jobs), func(i int) error {
		for n := range runsPerJob {
			code, out, errOut := e.run(ctx, "run", "-on-error", "fail", "-health", "none", jobs[i])
			if code != 0 {
				return fmt.Errorf("run %d of job %s exited %d:\n%s%s", n+1, jobs[i], code, out, errOut)
			}
		}
		return nil
	})
	if got := adoptions(t, metrics); got != 0 {
		t.Errorf("the agent took up %v restarts that a run drove; want none", got)
	}
	st := nomadRestarts(adminClient(t, c))
	for _, j := range jobs {
		recs, err := st.List(ctx, store.Filter{JobID: j})
		if err != nil {
			t.Fatal(err)
		}
		// The store keeps the newest 20 ended restarts of a job (and the one created).
		if len(recs) < store.DefaultKeep {
			t.Fatalf("%d restarts of job %s are kept, want at least %d", len(recs), j, store.DefaultKeep)
		}
		for _, rec := range recs {
			started, tookOver, detached := agenttest.DriverEvents(rec)
			if rec.Status != restart.StatusSucceeded || started != 1 || tookOver != 0 || detached != 0 {
				t.Errorf("restart %s of job %s ended %s with %d starts, %d takeovers, %d detaches; want succeeded, driven by its run alone:\n%s",
					agenttest.Short(rec.ID), j, rec.Status, started, tookOver, detached, agenttest.EventLines(rec))
			}
		}
		assertMainRestarted(t, c, j, runsPerJob)
	}

	// -detach keeps no lease: the agent takes the restart up and drives it to its end.
	id, _ := e.runDetached(t, ctx, "-on-error", "fail", "-health", "none", "web")
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return strings.HasPrefix(r.ID, id) && r.Status.Terminal() })
	if final := statusOf(t, ctx, e, id); final.Status != restart.StatusSucceeded {
		t.Fatalf("the detached restart ended %s (%s)", final.Status, final.Reason)
	}
	if got := adoptions(t, metrics); got != 1 {
		t.Errorf("the agent took up %v restarts; want the detached one", got)
	}
}

// With an agent running, `run -jobs` drives its fleet, and every child the fleet files,
// from their first writes: the agent takes up neither.
func TestRunFleetBesideAnAgentDrivesItsOwnChildren(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "svc", 4, 1)
	e, ctx, metrics := besideAnAgent(t, c)

	const fleets = 5
	for n := range fleets {
		code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^svc-"`, "-max-parallel-jobs", "4", "-on-error", "fail", "-health", "none")
		if code != 0 || !strings.Contains(out, "Fleet restarted 4 jobs successfully!") {
			t.Fatalf("fleet %d exited %d:\n%s%s", n+1, code, out, errOut)
		}
		f := fleetOf(t, ctx, e, fleetIDIn(t, out))
		for _, j := range f.Jobs {
			child := statusOf(t, ctx, e, j.RestartID)
			started, tookOver, detached := agenttest.DriverEvents(child)
			if child.Status != restart.StatusSucceeded || started != 1 || tookOver != 0 || detached != 0 {
				t.Errorf("fleet %d: the restart of job %s ended %s with %d starts, %d takeovers, %d detaches; want succeeded, driven by the fleet's process alone:\n%s",
					n+1, j.JobID, child.Status, started, tookOver, detached, agenttest.EventLines(child))
			}
		}
	}
	if got := adoptions(t, metrics); got != 0 {
		t.Errorf("the agent took up %v restarts that a fleet drove; want none", got)
	}
	for i := range 4 {
		assertMainRestarted(t, c, fmt.Sprintf("svc-%d", i), fleets)
	}
}

// startEagerAgent runs an agent on c, built as `nomad-restart agent` builds it, that lists
// the records as soon as Nomad answers rather than at most once a second: it sees every
// record the instant it is written, as an idle agent's blocking listing does. It returns
// the address of its /metrics.
func startEagerAgent(t *testing.T, c *nomadsim.Cluster) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := "agent@eager"
	p := buildParts(partsConfig{client: simtest.Client(t, c), logger: logger, holder: holder,
		health: engine.HealthConfig{Clock: c.Now, TimeScale: c.TimeScale()}, sharedWatch: true})
	ag, err := agent.New(p.agentConfig(agent.Config{Namespace: "*", Holder: holder, Logger: logger,
		Metrics: agent.NewMetrics(), MinListGap: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Run(t, ag)
	srv := httptest.NewServer(ag.Handler())
	t.Cleanup(srv.Close)
	simtest.WaitFor(t, testCtx(t), "the agent's first listing (/healthz)", func() bool {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return srv.URL + "/metrics"
}

// adoptions reads the agent's count of restarts it took up from its /metrics.
func adoptions(t *testing.T, url string) float64 {
	t.Helper()
	body := agenttest.Get(t, url, http.StatusOK)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "nomad_restart_adoptions_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("reading %q: %v", sc.Text(), err)
			}
			return n
		}
	}
	t.Fatalf("no nomad_restart_adoptions_total in the agent's metrics:\n%s", body)
	return 0
}
