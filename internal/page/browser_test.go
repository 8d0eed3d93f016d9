package page_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// browserPath finds headless Chromium (Debian's chromium package, which scripts/test
// installs). Without it the test fails rather than skip, so a missing browser never passes
// for a tested page.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: install Debian's chromium package (scripts/test does it when run as root)")
	return ""
}

// newBrowser starts headless Chromium for the test; the context ends after agenttest.Timeout.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath(t)), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, agenttest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// waitJS waits until the JavaScript expression is truthy in the page and returns its value.
// It polls on the page's own clock and ends with the test's context, never on a fixed sleep.
func waitJS[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		last, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ''`))
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, last)
	}
	return v
}

// waitNavigation waits until the page's path starts with prefix and returns it. A poll in
// the page does not survive a navigation, so this asks again until the new page answers.
func waitNavigation(t *testing.T, ctx context.Context, prefix string) string {
	t.Helper()
	for {
		path, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`))
		if err == nil && strings.HasPrefix(path, prefix) {
			return path
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page never went to %s…: last %q, %v", prefix, path, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// markNoReload marks the page's window: the mark is gone if the page reloads, so a test
// that finds it later knows the page changed in place.
func markNoReload(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__sameDocument = true`)); err != nil {
		t.Fatal(err)
	}
}

func checkNoReload(t *testing.T, ctx context.Context) {
	t.Helper()
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__sameDocument === true`))
	if err != nil || !same {
		t.Errorf("the page was reloaded (or navigated) instead of updating in place (err %v)", err)
	}
}

// The web page in a real browser, live: the list is open before the agent runs; the agent's
// records watch pushes each change to it (no reload, no fixed refresh) until the bar is full
// and the status succeeded; the link leads to the restart's page, whose timeline draws a row
// per allocation with its bars and a lane per batch.
func TestWebPageInHeadlessChromium(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 4, map[string]string{"nomadsim.start_delay": "10s"})
	rec := e.Detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	srv := serve(t, a, nil)

	// Before the agent runs, the restart is pending with an empty bar.
	row := `tr.restart[data-id="` + rec.ID + `"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		t.Fatalf("loading the list page: %v", err)
	}
	first, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(row+` [role="progressbar"]`), "aria-valuenow"))
	if err != nil {
		t.Fatalf("reading the progress bar: %v", err)
	}
	if first.Value != "0" {
		t.Fatalf("progress before the agent ran = %q, want 0", first.Value)
	}
	waitJS[bool](t, ctx, "the live stream to open", `document.body.dataset.live === 'open'`)
	markNoReload(t, ctx)

	agenttest.Run(t, a)
	status := `(function(){const r=document.querySelector('` + row + `');if(!r)return '';` +
		`return r.querySelector('[role="progressbar"]').getAttribute('aria-valuenow')+' '+r.querySelector('.st').textContent;})()`
	waitJS[bool](t, ctx, "the list to show the restart succeeded", status+` === '100 succeeded'`)
	checkNoReload(t, ctx)
	if n := waitJS[float64](t, ctx, "updates", `Number(document.body.dataset.updates)`); n < 2 {
		t.Errorf("the list was updated %v times by the stream, want the first state and later changes", n)
	}

	// Follow the link to the restart's page.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+` a`)), chromedp.WaitVisible(chromedp.CSS(`#allocs`))); err != nil {
		t.Fatalf("opening the restart's page: %v", err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(title, rec.ID[:8]) {
		t.Errorf("detail page title %q lacks the restart's ID", title)
	}
	states, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#allocs tr.alloc')).map(r => r.dataset.state)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 4 {
		t.Fatalf("detail page lists %d allocations, want 4", len(states))
	}
	for i, s := range states {
		if s != string(restart.AllocDone) {
			t.Errorf("allocation %d shown %q, want done", i, s)
		}
	}
	checkFinishedTimeline(t, ctx, 4)
}

// checkFinishedTimeline checks the drawn timeline of a finished restart of n allocations in
// batches of one: a row per allocation, each with bars of a visible width and no bar still
// open, and a lane per batch with its span.
func checkFinishedTimeline(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	type drawn struct {
		Rows, Bars, Open, Narrow, Lanes, Spans int
		Width                                  float64
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[drawn](`(function(){
	  const rows = document.querySelectorAll('#timeline-allocs g.tl-row');
	  const bars = document.querySelectorAll('#timeline-allocs rect.tl-bar');
	  return {Rows: rows.length, Bars: bars.length,
	    Open: document.querySelectorAll('#timeline-allocs rect.open').length,
	    Narrow: Array.from(bars).filter(b => b.getBBox().width < 2).length,
	    Lanes: document.querySelectorAll('#timeline-batches g.tl-batch').length,
	    Spans: document.querySelectorAll('#timeline-batches g.tl-batch rect').length,
	    Width: document.getElementById('timeline-allocs').getBoundingClientRect().width};
	})()`))
	if err != nil {
		t.Fatalf("reading the timeline: %v", err)
	}
	if got.Rows != n || got.Bars < n || got.Open != 0 || got.Narrow != 0 || got.Lanes != n || got.Spans != n || got.Width < 200 {
		t.Errorf("finished restart's timeline = %+v, want %d rows with closed bars, %d batch lanes with spans, drawn wide", got, n, n)
	}
	checkBudgetLane(t, ctx)
}

// checkBudgetLane checks the availability budget drawn for group web of a restart in
// batches of one: one allocation out of service at a time against a budget of one, the
// area and the budget line drawn across the chart, the lane labelled for assistive
// technology.
func checkBudgetLane(t *testing.T, ctx context.Context) {
	t.Helper()
	type lane struct {
		Lanes               int
		Label, Peak, Title  string
		AreaWidth, LineWide float64
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[lane](`(function(){
	  const lanes = document.querySelectorAll('#timeline-budget g.tl-budget');
	  const g = document.querySelector('#timeline-budget g.tl-budget[data-group="web"]');
	  if (!g) return {Lanes: lanes.length};
	  return {Lanes: lanes.length, Label: g.getAttribute('aria-label'),
	    Peak: g.querySelector('text.budget-label').textContent, Title: g.querySelector('title').textContent,
	    AreaWidth: g.querySelector('path.budget-out').getBBox().width,
	    LineWide: g.querySelector('path.budget-line').getBBox().width};
	})()`))
	if err != nil {
		t.Fatalf("reading the budget lane: %v", err)
	}
	want := "group web: out of service 1 / budget 1"
	if got.Lanes != 1 || got.Label != want || got.Title != want || got.Peak != "out of service 1 / budget 1" || got.AreaWidth < 20 || got.LineWide < 200 {
		t.Errorf("budget lane = %+v, want one lane %q with its area and budget line drawn", got, want)
	}
}

// requestLog records what reached the agent's page over HTTP: every URL, every cookie and
// the token header of every action.
type requestLog struct {
	mu      sync.Mutex
	urls    []string
	cookies []string
	tokens  []string // X-Nomad-Token of each POST
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.urls = append(l.urls, r.URL.String())
		if c := r.Header.Get("Cookie"); c != "" {
			l.cookies = append(l.cookies, c)
		}
		if r.Method == http.MethodPost {
			l.tokens = append(l.tokens, r.Header.Get(page.TokenHeader))
		}
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// setToken enters token in the page's ACL token form, as a user does.
func setToken(t *testing.T, ctx context.Context, token string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.getElementById('token-panel').open = true; document.getElementById('token').value = ''`),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	if err != nil {
		t.Fatalf("entering the token: %v", err)
	}
	waitJS[bool](t, ctx, "the token to be set", `document.body.dataset.token === 'set'`)
}

// pageAction clicks an action's button (or, for answer, submits text) and returns the
// outcome the page shows: "ok" or "error", and its message.
func pageAct(t *testing.T, ctx context.Context, action, answer string) (string, string) {
	t.Helper()
	var click chromedp.Action[chromedp.Void]
	if action == "answer" {
		waitJS[bool](t, ctx, "the answer form", `!document.getElementById('answer-form').hidden`)
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`#answer`), answer)); err != nil {
			t.Fatal(err)
		}
		click = chromedp.Click(chromedp.CSS(`#answer-form button[type="submit"]`))
	} else {
		click = chromedp.Click(chromedp.CSS(`#act-` + action))
	}
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById('action-msg').removeAttribute('data-outcome')`), click); err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	outcome := waitJS[string](t, ctx, "the outcome of "+action, `document.getElementById('action-msg').dataset.outcome`)
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#action-msg`)))
	if err != nil {
		t.Fatal(err)
	}
	return outcome, text
}

// Steering from the page with the user's own token, against a cluster with ACLs: with a
// token that may only read, pause, resume, cancel and answer each fail with a message naming
// the missing permission and nothing changes; with the operator policy of deploy/ each works
// and the page follows the restart to its cancel without a reload. The token goes in a
// header only: never in a URL, a cookie, or the agent's logs.
func TestWebPageSteersWithTheUsersToken(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.Register(t, "default", "web", 3, nil)
	rec := e.Detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true})
	var logs simtest.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := e.newAgent(t, "agent", e.ShippedToken(t, "agent"), func(c *agent.Config) {
		c.Logger = logger
		c.Actions = e.tokenActions(logger)
	})
	var seen requestLog
	srv := serve(t, a, seen.wrap)
	readOnly := e.readOnlyToken(t)
	operator := e.ShippedToken(t, "operator")
	var browserURLs simtest.SyncBuffer
	chromedp.Listen(ctx, func(ev any) {
		if r, ok := ev.(*network.EventRequestWillBeSent); ok {
			fmt.Fprintln(&browserURLs, r.Request.URL)
		}
	})

	agenttest.Run(t, a)
	asked := e.WaitRecord(t, rec, "waiting for an answer", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/restart/"+rec.ID[:8]), chromedp.WaitVisible(chromedp.CSS(`#actions`))); err != nil {
		t.Fatalf("opening the restart's page: %v", err)
	}
	waitJS[bool](t, ctx, "the live stream", `document.body.dataset.live === 'open'`)
	markNoReload(t, ctx)
	checkRunningTimeline(t, ctx)

	setToken(t, ctx, readOnly)
	for _, act := range []string{"pause", "resume", "cancel", "answer"} {
		outcome, msg := pageAct(t, ctx, act, "yes")
		t.Logf("%s with a read-only token: %s", act, msg)
		if outcome != "error" || !strings.Contains(msg, "Permission denied") || !strings.Contains(msg, `"write"`) || !strings.Contains(msg, "nomad-restart/*") {
			t.Errorf("%s with a read-only token: %s %q, want a denial naming the write capability and the rule to grant", act, outcome, msg)
		}
	}
	cur, err := e.Store.Get(agenttest.Context(t), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status != restart.StatusWaiting || cur.Control != asked.Control {
		t.Errorf("the read-only token changed the restart: status %s, control %+v (was %+v)", cur.Status, cur.Control, asked.Control)
	}
	counts, err := simtest.CountRestarts(agenttest.Context(t), e.Client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(counts.InPlace) != 1 {
		t.Errorf("after the read-only token's actions %d allocations were restarted, want the first batch's 1", len(counts.InPlace))
	}

	setToken(t, ctx, operator)
	if outcome, msg := pageAct(t, ctx, "answer", "yes"); outcome != "ok" {
		t.Fatalf("answer with the operator policy: %s", msg)
	}
	again := e.WaitRecord(t, rec, "asking after batch 2", func(r *restart.Record) bool {
		return r.Status == restart.StatusWaiting && r.Question != nil && r.Question.ID != asked.Question.ID
	})
	for _, step := range []struct {
		act    string
		intent restart.Intent
	}{{"pause", restart.IntentPause}, {"resume", restart.IntentRun}, {"cancel", restart.IntentCancel}} {
		if outcome, msg := pageAct(t, ctx, step.act, ""); outcome != "ok" {
			t.Fatalf("%s with the operator policy: %s", step.act, msg)
		}
		got := e.WaitRecord(t, again, "steered", func(r *restart.Record) bool { return r.Control.Intent == step.intent || r.Status.Terminal() })
		if !strings.HasPrefix(got.Control.By, "page of ") {
			t.Errorf("after %s the record says it was asked by %q", step.act, got.Control.By)
		}
	}
	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusCanceled {
		t.Fatalf("restart ended %s, want canceled", final.Status)
	}
	waitJS[bool](t, ctx, "the page to show the cancel", `document.getElementById('status').textContent === 'canceled' && document.getElementById('act-pause').disabled`)
	checkNoReload(t, ctx)

	cookie, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if cookie != "" || len(seen.cookies) != 0 {
		t.Errorf("cookies: page %q, sent %q", cookie, seen.cookies)
	}
	if len(seen.tokens) != 8 || seen.tokens[0] != readOnly || seen.tokens[7] != operator {
		t.Errorf("the actions carried %d token headers (want 8, the read-only one then the operator's)", len(seen.tokens))
	}
	for _, secret := range []string{readOnly, operator} {
		for where, text := range map[string]string{"browser's URLs": browserURLs.String(), "agent's URLs": strings.Join(seen.urls, "\n"), "agent's logs": logs.String()} {
			if strings.Contains(text, secret) {
				t.Errorf("a token appears in the %s", where)
			}
		}
	}
	if !strings.Contains(logs.String(), "action from the page") {
		t.Errorf("the agent's logs lack its actions (the capture missed them?):\n%s", logs.String())
	}
}

// The page through an agent restart: while no agent answers, the page says that it is out
// of date; once an agent serves the same address again, the page reconnects by itself,
// drops the banner and shows what changed meanwhile, without a reload.
func TestWebPageReconnectsThroughAnAgentRestart(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 2, nil)
	e.Register(t, "default", "api", 2, nil)
	first := e.Detached(t, "default", "web", restart.Spec{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	stop1 := agenttest.Run(t, a1)
	srv1 := &http.Server{Handler: a1.Handler()}
	go func() { _ = srv1.Serve(ln) }()

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.CSS(`tr.restart[data-id="`+first.ID+`"]`))); err != nil {
		t.Fatalf("loading the list page: %v", err)
	}
	waitJS[bool](t, ctx, "the live stream", `document.body.dataset.live === 'open'`)
	markNoReload(t, ctx)

	// The agent stops (as on SIGTERM: its streams end first, then its listener).
	stop1()
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}
	waitJS[bool](t, ctx, "the stale banner", `!document.getElementById('stale').hidden && document.body.dataset.live === 'down'`)
	banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#stale`)))
	if err != nil || !strings.Contains(banner, "out of date") {
		t.Errorf("stale banner = %q (%v), want it to say the page may be out of date", banner, err)
	}

	// Meanwhile a restart is filed; then a new agent serves the same address.
	second := e.Detached(t, "default", "api", restart.Spec{})
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), nil)
	stop2 := agenttest.Run(t, a2)
	srv2 := &http.Server{Handler: a2.Handler()}
	go func() { _ = srv2.Serve(ln2) }()
	t.Cleanup(func() {
		stop2() // its streams end first
		_ = srv2.Close()
	})
	waitJS[bool](t, ctx, "the page to reconnect and show the new restart",
		`document.body.dataset.live === 'open' && document.getElementById('stale').hidden && !!document.querySelector('tr.restart[data-id="`+second.ID+`"]')`)
	checkNoReload(t, ctx)
}

// The page while its agent cannot reach Nomad: the stream still works, and the page shows
// the banner saying it may be out of date, with since when and why; once the agent reads
// the records again the banner goes, without a reload.
func TestWebPageSaysWhileNomadCannotBeReached(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	e := startEnv(t, nomadsim.Options{})
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), func(c *agent.Config) { c.ListWait = 200 * time.Millisecond })
	agenttest.Run(t, a)
	srv := serve(t, a, nil)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#live`))); err != nil {
		t.Fatalf("loading the list page: %v", err)
	}
	waitJS[bool](t, ctx, "the live stream", `document.body.dataset.live === 'open' && document.body.dataset.updates > 0`)
	markNoReload(t, ctx)

	reachable := e.Sim.SetFault(nomadsim.Fault{Path: "/v1/", Drop: true})
	waitJS[bool](t, ctx, "the banner", `document.body.dataset.nomad === 'unreachable' && !document.getElementById('stale').hidden`)
	banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#stale`)))
	if err != nil || !strings.Contains(banner, "cannot read the restarts' records since") || !strings.Contains(banner, "out of date") {
		t.Errorf("banner = %q (%v), want it to say since when the agent cannot read Nomad, and that the page may be out of date", banner, err)
	}
	if live, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.live`)); live != "open" {
		t.Errorf("the stream is %q while Nomad is unreachable, want it open", live)
	}

	reachable()
	waitJS[bool](t, ctx, "the banner to go", `document.body.dataset.nomad === 'ok' && document.getElementById('stale').hidden`)
	checkNoReload(t, ctx)
}

// checkRunningTimeline checks the timeline of a restart of 3 allocations in batches of one,
// waiting after its first batch: the first row has its bars and is done, the others have
// none yet; the first batch's lane has its span, the later lanes none.
func checkRunningTimeline(t *testing.T, ctx context.Context) {
	t.Helper()
	type drawn struct {
		Rows, RowsWithBars, Lanes, Spans int
		First                            string
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[drawn](`(function(){
	  const rows = Array.from(document.querySelectorAll('#timeline-allocs g.tl-row'));
	  return {Rows: rows.length, RowsWithBars: rows.filter(r => r.querySelector('rect.tl-bar')).length,
	    First: rows.length ? rows[0].dataset.outcome : '',
	    Lanes: document.querySelectorAll('#timeline-batches g.tl-batch').length,
	    Spans: document.querySelectorAll('#timeline-batches g.tl-batch rect').length};
	})()`))
	if err != nil {
		t.Fatalf("reading the timeline: %v", err)
	}
	if want := (drawn{Rows: 3, RowsWithBars: 1, Lanes: 3, Spans: 1, First: "done"}); got != want {
		t.Errorf("running restart's timeline = %+v, want %+v", got, want)
	}
}

// Filing a restart from the page: the plan (a dry run) comes first; a token that may only
// read gets the plan but cannot file it, and nothing is recorded; with the operator policy
// the reviewed plan is filed, the page opens the new restart, and the agent drives it to
// its end while the page follows.
func TestWebPageFilesARestartAfterItsPlan(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.Register(t, "default", "api", 2, nil)
	a := e.newAgent(t, "agent", e.ShippedToken(t, "agent"), func(c *agent.Config) { c.Actions = e.tokenActions(nil) })
	srv := serve(t, a, nil)
	agenttest.Run(t, a)
	readOnly := e.readOnlyToken(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#file-panel`))); err != nil {
		t.Fatalf("loading the list page: %v", err)
	}
	setToken(t, ctx, readOnly)
	err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.getElementById('file-panel').open = true`),
		chromedp.SendKeys(chromedp.CSS(`#file-job`), "api"),
		chromedp.Click(chromedp.CSS(`#file-form button[type="submit"]`)))
	if err != nil {
		t.Fatalf("asking for the plan: %v", err)
	}
	if n := waitJS[float64](t, ctx, "the plan", `document.querySelectorAll('#plan-allocs tr.planned').length`); n != 2 {
		t.Fatalf("the plan lists %v allocations, want 2", n)
	}
	fileIt := func() {
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById('file-msg').removeAttribute('data-outcome')`),
			chromedp.Click(chromedp.CSS(`#file-submit`))); err != nil {
			t.Fatal(err)
		}
	}
	fileIt()
	got := waitJS[string](t, ctx, "the filing's outcome", `(function(){const m=document.getElementById('file-msg');return m.dataset.outcome ? m.dataset.outcome+' '+m.textContent : ''})()`)
	if !strings.HasPrefix(got, "error ") || !strings.Contains(got, "Permission denied") || !strings.Contains(got, `"write"`) {
		t.Errorf("filing with a read-only token: %q, want a denial naming the write capability", got)
	}
	recs, err := e.Store.List(agenttest.Context(t), store.Filter{Namespace: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Fatalf("the read-only token recorded %d restarts", len(recs))
	}

	setToken(t, ctx, e.ShippedToken(t, "operator"))
	fileIt() // on success the page opens the new restart
	path := waitNavigation(t, ctx, "/restart/")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#timeline-batches`))); err != nil {
		t.Fatalf("the new restart's page: %v", err)
	}
	rec, err := e.Store.Find(agenttest.Context(t), "default", strings.TrimPrefix(path, "/restart/"))
	if err != nil {
		t.Fatalf("the page opened %s, which is no restart: %v", path, err)
	}
	final := e.WaitSucceeded(t, rec)
	e.CheckOnce(t, final)
	waitJS[bool](t, ctx, "the page to show the restart succeeded", `document.getElementById('status').textContent === 'succeeded'`)
}
