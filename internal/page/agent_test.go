package page_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// Filing from the page refuses what `run` refuses with the same words, files only the plan
// the user reviewed, and refuses cross-site requests; a refusal records nothing.
func TestPageFilingRefusals(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 2, nil)
	a := e.newAgent(t, "agent", e.Sim.BootstrapToken(), func(c *agent.Config) { c.Actions = e.tokenActions(nil) })
	srv := serve(t, a, nil)
	tests := []struct {
		name   string
		path   string
		header map[string]string
		body   string
		status int
		says   string
	}{
		{"no job", "/restarts/plan", nil, `{"Job":" "}`, http.StatusBadRequest, "give the job to restart"},
		{"a bad batch size", "/restarts/plan", nil, `{"Job":"web","BatchSize":"0"}`, http.StatusBadRequest, `invalid -batch-size value "0"`},
		{"a bad health mode", "/restarts/plan", nil, `{"Job":"web","Health":"soon"}`, http.StatusBadRequest, `invalid -health value "soon"`},
		{"an option given empty", "/restarts", nil, `{"Job":"web","Health":""}`, http.StatusBadRequest, `invalid -health value "": it is empty`},
		{"a batch size over 100%", "/restarts", nil, `{"Job":"web","BatchSize":"101%"}`, http.StatusBadRequest, `a percentage must be at most 100%`},
		{"a misspelt option", "/restarts", nil, `{"Job":"web","Heath":"none"}`, http.StatusBadRequest, `unknown field "Heath"`},
		{"an option of the wrong type", "/restarts", nil, `{"Job":"web","Reschedule":"yes"}`, http.StatusBadRequest, "not JSON of a restart like"},
		{"two restarts in one body", "/restarts", nil, `{"Job":"web"} {"Job":"web"}`, http.StatusBadRequest, "more than one JSON value"},
		{"an unset variable for a filter", "/restarts", nil, `{"Job":"web","Filter":""}`, http.StatusBadRequest, `invalid -filter value "": it is empty`},
		{"drain until lines of an unknown balancer", "/restarts/plan", nil, `{"Job":"web","DrainUntil":"traefik=http://traefik:8080\nnginx=http://lb:80"}`, http.StatusBadRequest, `invalid -drain-until value "nginx=http://lb:80": unknown balancer; give traefik=`},
		{"drain until given blank", "/restarts", nil, `{"Job":"web","DrainUntil":" \n"}`, http.StatusBadRequest, `invalid -drain-until value " \n": it is empty`},
		{"a balancer refresh without a unit", "/restarts", nil, `{"Job":"web","BalancerRefresh":"traefik=5"}`, http.StatusBadRequest, `invalid -balancer-refresh value "traefik=5": give a duration`},
		{"repeatable options of the wrong type", "/restarts", nil, `{"Job":"web","DrainUntil":7}`, http.StatusBadRequest, "give Gates, DrainUntil and BalancerRefresh as a list"},
		{"an unknown job", "/restarts/plan", nil, `{"Job":"nope"}`, http.StatusBadRequest, `No job(s) with prefix or ID "nope"`},
		{"a plan other than the one reviewed", "/restarts", nil, `{"Job":"web","Expect":["not-an-alloc"]}`, http.StatusConflict, "review the new plan"},
		{"from another site", "/restarts", map[string]string{"Sec-Fetch-Site": "cross-site"}, `{"Job":"web"}`, http.StatusForbidden, "cross-origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := agenttest.Post(t, srv.URL+tt.path, tt.header, tt.body)
			var res struct{ Error string }
			if json.Unmarshal([]byte(body), &res) == nil {
				body = res.Error
			}
			if status != tt.status || !strings.Contains(body, tt.says) {
				t.Errorf("status %d %s, want %d saying %q", status, body, tt.status, tt.says)
			}
		})
	}
	recs, err := e.Store.List(agenttest.Context(t), store.Filter{Namespace: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("refused filings recorded %d restarts", len(recs))
	}

	status, body := agenttest.Post(t, srv.URL+"/restarts/plan", nil, `{"Job":"web","BatchSize":"50%","Health":"none"}`)
	if status != http.StatusOK || !strings.Contains(body, "in 2 batches of 50%") || !strings.Contains(body, "health none") {
		t.Fatalf("plan: %d %s", status, body)
	}
	if recs, _ := e.Store.List(agenttest.Context(t), store.Filter{Namespace: "*"}); len(recs) != 0 {
		t.Errorf("a plan recorded %d restarts: it must be a dry run", len(recs))
	}
	p, err := e.Planner.Plan(agenttest.Context(t), engine.Request{Namespace: "default", Job: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var allocs []string
	for _, a := range p.Record.Allocs {
		allocs = append(allocs, a.ID)
	}
	expect := `["` + strings.Join(allocs, `","`) + `"]`
	status, body = agenttest.Post(t, srv.URL+"/restarts", nil, `{"Job":"web","BatchSize":"50%","Health":"none","Expect":`+expect+`}`)
	if status != http.StatusOK || !strings.Contains(body, `"id"`) {
		t.Fatalf("filing the reviewed plan: %d %s", status, body)
	}
	recs, err = e.Store.List(agenttest.Context(t), store.Filter{Namespace: "*"})
	if err != nil || len(recs) != 1 || recs[0].Spec.Health != restart.HealthNone || recs[0].Batches != 2 {
		t.Fatalf("after filing: %d records (%v)", len(recs), err)
	}
}

// Actions are refused, before any Nomad request, when they come from another site, by any
// method but POST, for unknown actions and restarts, and for an answer nobody asked for;
// nothing of the restart changes. Without ACLs no token is needed, and a same-origin pause
// is stored with the page as its author.
func TestPageActionsRefusals(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 1, nil)
	rec := e.Detached(t, "default", "web", restart.Spec{})
	var (
		mu     sync.Mutex
		tokens []string
	)
	built := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), tokens...)
	}
	a := e.newAgent(t, "agent", e.Sim.BootstrapToken(), func(c *agent.Config) {
		actions := e.tokenActions(nil)
		c.Actions = func(token string) (page.Actions, error) {
			mu.Lock()
			tokens = append(tokens, token)
			mu.Unlock()
			return actions(token)
		}
	})
	srv := serve(t, a, nil)
	base := srv.URL + "/restart/" + rec.ID
	tests := []struct {
		name    string
		path    string
		headers map[string]string
		body    string
		status  int
		says    string
	}{
		{"another site (Fetch metadata)", "/pause", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden, "cross-origin"},
		{"another origin", "/pause", map[string]string{"Origin": "http://evil.example"}, "", http.StatusForbidden, "cross-origin"},
		{"unknown action", "/delete", nil, "", http.StatusNotFound, "pause, resume, cancel and answer"},
		{"answer to no question", "/answer", nil, `{"Answer":"yes"}`, http.StatusConflict, "not waiting for an answer"},
		{"a body that is not JSON", "/pause", nil, `Answer=yes`, http.StatusBadRequest, "not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := agenttest.Post(t, base+tt.path, tt.headers, tt.body)
			if status != tt.status || !strings.Contains(strings.ToLower(body), strings.ToLower(tt.says)) {
				t.Errorf("status %d %q, want %d saying %q", status, body, tt.status, tt.says)
			}
		})
	}
	agenttest.Get(t, base+"/pause", http.StatusMethodNotAllowed)
	if status, body := agenttest.Post(t, srv.URL+"/restart/ffffffff/pause", nil, ""); status != http.StatusNotFound {
		t.Errorf("pause of an unknown restart: %d %s", status, body)
	}
	if n := len(built()); n != 0 {
		t.Fatalf("refused requests reached Nomad (%d steering clients built)", n)
	}
	cur, err := e.Store.Get(agenttest.Context(t), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.ModifyIndex != rec.ModifyIndex {
		t.Fatalf("refused requests changed the restart (index %d -> %d)", rec.ModifyIndex, cur.ModifyIndex)
	}

	status, body := agenttest.Post(t, base+"/pause", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL}, "")
	if status != http.StatusOK || !strings.Contains(body, "Pause requested") {
		t.Fatalf("same-origin pause without ACLs: %d %s", status, body)
	}
	cur, err = e.Store.Get(agenttest.Context(t), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := built(); cur.Control.Intent != restart.IntentPause || cur.Control.By != "page of agent" || len(got) != 1 || got[0] != "" {
		t.Errorf("after the pause: control %+v, tokens %q, want one empty token", cur.Control, built())
	}
}

// An agent without Config.Actions answers actions with the command to use instead.
func TestPageActionsWithoutSteering(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 1, nil)
	rec := e.Detached(t, "default", "web", restart.Spec{})
	srv := serve(t, e.newAgent(t, "agent", e.Sim.BootstrapToken(), nil), nil)
	status, body := agenttest.Post(t, srv.URL+"/restart/"+rec.ID+"/cancel", nil, "")
	if status != http.StatusNotImplemented || !strings.Contains(body, "nomad-restart cancel <id>") {
		t.Errorf("cancel without steering: %d %s", status, body)
	}
}

// The page pauses and resumes a fleet with the user's token; the list and the gauges show
// the paused fleet and its running restarts; actions on an ended fleet are refused.
func TestFleetPageSteers(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.RegisterJobs(t, "default", "st", 3, 2, agenttest.SlowStart)
	rec := e.FileFleet(t, "st", 1)
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), func(c *agent.Config) { c.Actions = e.tokenActions(nil) })
	srv := serve(t, a, nil)
	agenttest.Run(t, a)
	token := map[string]string{page.TokenHeader: e.Sim.BootstrapToken()}
	base := srv.URL + "/fleet/" + rec.ID

	e.WaitFleet(t, rec, "running a job", func(r *fleet.Record) bool { return r.Counts()[fleet.JobRunning] > 0 })
	ctx := agenttest.Context(t)
	fleetStream := streamEvents(t, ctx, base+"/events")
	listStream := streamEvents(t, ctx, srv.URL+"/events")
	if code, body := agenttest.Post(t, base+"/pause", token, ""); code != http.StatusOK || !strings.Contains(body, "Pause requested") {
		t.Fatalf("pause: %d %s", code, body)
	}
	paused := e.WaitFleet(t, rec, "paused", func(r *fleet.Record) bool { return r.Status == restart.StatusPaused })
	if paused.Control.By != "page of agent-1" {
		t.Errorf("pause recorded by %q, want the page", paused.Control.By)
	}
	// The live parts follow: the fleet's view and the list (the restarts' list stays).
	upd := waitUpdate(t, fleetStream, "the fleet's view to show it paused", func(u liveUpdate) bool { return u.Status == "paused" })
	if !strings.Contains(upd.HTML, `id="jobs"`) || !strings.Contains(upd.HTML, "Fleet paused") {
		t.Errorf("the fleet's live view lacks its jobs or its events: %s", upd.HTML)
	}
	waitUpdate(t, listStream, "the list to show the fleet paused", func(u liveUpdate) bool {
		return strings.Contains(u.HTML, `data-id="`+rec.ID+`" data-status="paused"`) && strings.Contains(u.HTML, `id="restarts"`)
	})
	metrics := srv.URL + "/metrics"
	simtest.WaitFor(t, ctx, "the gauges to show the paused fleet", func() bool {
		return gauge(t, metrics, `nomad_restart_fleets{status="paused"}`) == 1 &&
			gauge(t, metrics, `nomad_restart_fleet_jobs{status="pending"}`) == float64(paused.Counts()[fleet.JobPending])
	})
	if gauge(t, metrics, `nomad_restart_fleet_jobs{status="pending"}`) == 0 {
		t.Errorf("no job of the paused fleet is pending: %v", paused.Counts())
	}
	// The page's view of the agent is refreshed in the background: under load the list may
	// lag the fleet's record by a refresh, so it is read until it shows what the record says.
	var list string
	showsPaused := func() bool {
		list = agenttest.Get(t, srv.URL+"/", http.StatusOK)
		if !strings.Contains(list, `data-id="`+rec.ID+`" data-status="paused"`) {
			return false
		}
		for _, j := range paused.Jobs {
			if j.Status == fleet.JobRunning && !strings.Contains(list, `class="child" href="/restart/`+j.RestartID+`"`) {
				return false
			}
		}
		return true
	}
	simtest.WaitFor(t, ctx, "the list page to show the fleet paused with its running restarts", showsPaused)

	if code, body := agenttest.Post(t, base+"/resume", token, ""); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	final := e.WaitFleet(t, rec, "ended", func(r *fleet.Record) bool { return r.Status.Terminal() })
	e.CheckFleet(t, final, 1)

	refusals := []struct {
		name, path string
		headers    map[string]string
		code       int
		says       string
	}{
		{"an ended fleet", "/pause", token, http.StatusConflict, "already ended"},
		{"an unknown action", "/delete", token, http.StatusNotFound, "pause, resume, cancel and answer"},
		{"another site", "/cancel", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "cross-origin"},
	}
	for _, tt := range refusals {
		if code, body := agenttest.Post(t, base+tt.path, tt.headers, ""); code != tt.code || !strings.Contains(body, tt.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tt.name, code, body, tt.code, tt.says)
		}
	}
	if code, body := agenttest.Post(t, srv.URL+"/fleet/ffffffff/pause", token, ""); code != http.StatusNotFound {
		t.Errorf("pause of an unknown fleet: %d %s", code, body)
	}
}

// liveUpdate is the payload of a stream's "update" event, as the page's script reads it.
type liveUpdate struct {
	HTML     string `json:"html"`
	Status   string `json:"status"`
	Question string `json:"question"`
}

// waitUpdate reads a page stream's events until an "update" for which ok holds.
func waitUpdate(t *testing.T, events <-chan sseEvent, what string, ok func(liveUpdate) bool) liveUpdate {
	t.Helper()
	for ev := range events {
		if ev.name != "update" {
			continue
		}
		var u liveUpdate
		if err := json.Unmarshal([]byte(ev.data), &u); err != nil {
			t.Fatalf("an update that is not JSON: %v: %s", err, ev.data)
		}
		if ok(u) {
			return u
		}
	}
	t.Fatalf("the stream ended before %s", what)
	return liveUpdate{}
}

// gauge reads one series of the agent's /metrics at url (0 when it has none).
func gauge(t *testing.T, url, series string) float64 {
	t.Helper()
	for line := range strings.Lines(agenttest.Get(t, url, http.StatusOK)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// staleState is the payload of a stream's "stale" event, as the page's script reads it.
type staleState struct {
	Since string `json:"since"`
	Error string `json:"error"`
}

// waitStale reads events until a "stale" one for which ok holds, and returns it.
func waitStale(t *testing.T, ctx context.Context, events <-chan sseEvent, what string, ok func(staleState) bool) staleState {
	t.Helper()
	for {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("waiting for %s: the stream ended", what)
			}
			if ev.name != "stale" {
				continue
			}
			var st staleState
			if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
				t.Fatalf("stale event %q: %v", ev.data, err)
			}
			if ok(st) {
				return st
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// While the agent cannot reach Nomad, its page's stream, which still works, says since when
// and why (a "stale" event, for the page's banner); the first listing that works again
// clears it.
func TestStreamSaysWhileNomadCannotBeReached(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	// Short blocking queries, so that the agent's watch meets the outage soon.
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), func(c *agent.Config) { c.ListWait = 200 * time.Millisecond })
	agenttest.Run(t, a)
	srv := serve(t, a, nil)
	ctx := agenttest.Context(t)
	simtest.WaitFor(t, ctx, "the agent's first listing", a.Ready)
	events := streamEvents(t, ctx, srv.URL+"/events")
	for ev := range events {
		if ev.name == "stale" {
			t.Fatalf("a stale event %q while Nomad answers", ev.data)
		}
		if ev.name == "update" {
			break
		}
	}

	before := time.Now().Add(-time.Second)
	reachable := e.Sim.SetFault(nomadsim.Fault{Path: "/v1/", Drop: true}) // every connection dropped
	st := waitStale(t, ctx, events, "the stream to say Nomad cannot be read", func(s staleState) bool { return s.Since != "" })
	since, err := time.Parse(time.RFC3339, st.Since)
	if err != nil || since.Before(before.Truncate(time.Second)) || st.Error == "" {
		t.Errorf("stale event = %+v (%v), want the time of the first failure and its error", st, err)
	}
	agenttest.Get(t, srv.URL+"/", http.StatusOK) // the page is still served, from what the agent read last

	reachable()
	waitStale(t, ctx, events, "the stream to say Nomad is read again", func(s staleState) bool { return s == staleState{} })
}

// An agent that never reached Nomad (nothing listens at its address) says so on a stream
// opened meanwhile, before anything else.
func TestStreamSaysWhenNomadWasNeverReached(t *testing.T) {
	t.Parallel()
	conf := api.DefaultConfig()
	conf.Address = "http://" + simtest.ClosedAddr(t)
	client, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := buildAgent(agentConfig(agenttest.NomadParts(client), ""), engine.HealthConfig{})
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Run(t, a)
	srv := serve(t, a, nil)
	ctx := agenttest.Context(t)
	// Once the agent's first listing failed, a stream opened then says so first.
	var ev sseEvent
	simtest.WaitFor(t, ctx, "the agent's first listing to fail", func() bool {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ev = <-streamEvents(t, sctx, srv.URL+"/events")
		return ev.name == "stale"
	})
	var st staleState
	if err := json.Unmarshal([]byte(ev.data), &st); err != nil || !strings.Contains(st.Error, "refused") {
		t.Errorf("first event = %+v (%v), want a stale event naming the refused connection", ev, err)
	}
}

// A restart filed through the page's JSON API with no option gets run's defaults, resolved
// by the same planning: a job with checks is restarted health-gated with its update block's
// min healthy time, not "running" with none; filed without Expect, it is filed as planned
// now, as `run -detach` files it.
func TestPageFilingTakesRunsDefaults(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	job := simtest.ServedJob("checked", 2, "nomad", 0, 0)
	job.TaskGroups[0].Update = &api.UpdateStrategy{MinHealthyTime: new(3 * time.Second), HealthyDeadline: new(2 * time.Minute)}
	simtest.RegisterRunning(t, e.Sim, job)
	ctx := agenttest.Context(t)
	a := e.newAgent(t, "agent", e.Sim.BootstrapToken(), func(c *agent.Config) { c.Actions = e.tokenActions(nil) })
	srv := serve(t, a, nil)

	status, body := agenttest.Post(t, srv.URL+"/restarts/plan", nil, `{"Job":"checked"}`)
	if status != http.StatusOK || !strings.Contains(body, "health checks") {
		t.Fatalf("plan: %d %s", status, body)
	}
	var status2 int
	for range 50 { // the job's deployment may still run; Nomad refuses restarts meanwhile
		status2, body = agenttest.Post(t, srv.URL+"/restarts", nil, `{"Job":"checked"}`)
		if status2 != http.StatusBadRequest || !strings.Contains(body, "Deployment") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status2 != http.StatusOK {
		t.Fatalf("filing without Expect: %d %s", status2, body)
	}
	recs, err := e.Store.List(ctx, store.Filter{Namespace: "*"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("after filing: %d records (%v)", len(recs), err)
	}
	got := recs[0].Spec

	// What `run -detach checked` plans, through the same resolution.
	res, err := restart.Options{}.Resolve(restart.Detached)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Planner.Plan(ctx, engine.Request{Namespace: "default", Job: "checked", Spec: res.Spec})
	if err != nil {
		t.Fatal(err)
	}
	want := p.Record.Spec
	if got.Health != restart.HealthChecks || got.OnError != restart.OnErrorAsk ||
		got.GroupHealth["web"] != (restart.GroupHealth{MinHealthyTime: 3 * time.Second, HealthyDeadline: 2 * time.Minute}) {
		t.Fatalf("filed spec: %s on-error %s, groups %+v", got.Health, got.OnError, got.GroupHealth)
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("filed from the page:\n%s\nplanned as run -detach:\n%s", gotJSON, wantJSON)
	}
}
