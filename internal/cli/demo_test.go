package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// demoCtx bounds a demo run: it takes about half a minute of real time at time scale 1.
func demoCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runDemo runs `demo args...` in-process, off a terminal, with an empty environment.
func runDemo(ctx context.Context, args ...string) (code int, out, errOut *simtest.SyncBuffer) {
	out, errOut = &simtest.SyncBuffer{}, &simtest.SyncBuffer{}
	a := newApp(strings.NewReader(""), out, errOut, func(string) string { return "" })
	return a.run(ctx, append([]string{"demo"}, args...)), out, errOut
}

// TestDemoJSON runs `demo -json` and checks its one JSON object: measured on the simulated
// cluster, Nomad's way leaves no instance serving for a while (the 4 instances are
// restarted within a fraction of the 3 s each needs to serve again), nomad-restart's keeps
// 3 of 4 serving throughout and takes at least 4 times those 3 s. Through the load
// balancer, requests fail Nomad's way, and a smaller share of them nomad-restart's (not
// none: Nomad's catalog, which the balancer reads, has no health).
func TestDemoJSON(t *testing.T) {
	ctx := demoCtx(t)
	code, out, errOut := runDemo(ctx, "-json", "-time-scale=2")
	if code != 0 {
		t.Fatalf("demo -json: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	dec := json.NewDecoder(strings.NewReader(out.String()))
	var got struct {
		Count        int            `json:"count"`
		Nomad        servingFigures `json:"nomad"`
		NomadRestart servingFigures `json:"nomad_restart"`
	}
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("demo -json is not JSON: %v\n%s", err, out.String())
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		t.Fatalf("demo -json printed more than one JSON object: %v\n%s", err, out.String())
	}
	n, g := got.Nomad, got.NomadRestart
	if got.Count != demoCount {
		t.Errorf("count %d, want %d", got.Count, demoCount)
	}
	if g.MinServing != demoCount-1 || g.NoneServingShare != 0 {
		t.Errorf("nomad-restart: %+v; want %d serving at least and never none", g, demoCount-1)
	}
	if n.MinServing != 0 || n.NoneServingShare <= 0.3 {
		t.Errorf("as Nomad does: %+v; want none serving for a good share of the time", n)
	}
	serveAfter := (demoStartDelay + demoWarmUp).Seconds()
	if n.Seconds < serveAfter || g.Seconds < demoCount*serveAfter || n.RestartSeconds > n.Seconds || g.RestartSeconds > g.Seconds {
		t.Errorf("times: as Nomad does %+v, nomad-restart %+v: an instance needs %.0fs to serve again", n, g, serveAfter)
	}
	if n.RestartID == "" || g.RestartID == "" || n.RestartID == g.RestartID {
		t.Errorf("restart IDs %q and %q", n.RestartID, g.RestartID)
	}
	for name, f := range map[string]servingFigures{"as Nomad does": n, "nomad-restart": g} {
		if f.Requests <= 0 || f.FailedRequests < 0 || f.FailedRequests > f.Requests {
			t.Errorf("%s: %d of %d requests failed; want some requests, and no more failed than sent", name, f.FailedRequests, f.Requests)
		}
	}
	if n.FailedRequests == 0 {
		t.Errorf("as Nomad does: no request of %d failed, with no instance serving for %.0f%% of the time", n.Requests, 100*n.NoneServingShare)
	}
	if failedShare(g) >= failedShare(n) {
		t.Errorf("nomad-restart failed %d of %d requests, as Nomad does %d of %d: want a smaller share",
			g.FailedRequests, g.Requests, n.FailedRequests, n.Requests)
	}
}

// failedShare is the share of f's requests that failed.
func failedShare(f servingFigures) float64 {
	if f.Requests == 0 {
		return 0
	}
	return float64(f.FailedRequests) / float64(f.Requests)
}

var (
	pageRe     = regexp.MustCompile(`(http://127\.0\.0\.1:\d+/) +\(the agent's page\)`)
	statusHint = regexp.MustCompile(`NOMAD_ADDR=(\S+) nomad-restart status ([0-9a-f]{8})`)
)

// TestDemoHumanOutputAndPage runs the demo with -http-addr: it prints both restarts and
// the figures side by side, then keeps its cluster and the agent's page up until Ctrl-C
// (here, its context canceled); the restart it names can be looked at with status and on
// the page.
func TestDemoHumanOutputAndPage(t *testing.T) {
	ctx := demoCtx(t)
	runCtx, ctrlC := context.WithCancel(ctx)
	out, errOut := &simtest.SyncBuffer{}, &simtest.SyncBuffer{}
	a := newApp(strings.NewReader(""), out, errOut, func(string) string { return "" })
	done := make(chan int, 1)
	go func() { done <- a.run(runCtx, []string{"demo", "-time-scale=3", "-http-addr=127.0.0.1:0"}) }()
	simtest.WaitFor(t, ctx, "the demo to serve its page", func() bool {
		select {
		case code := <-done:
			t.Fatalf("demo ended before Ctrl-C: exit %d\n%s\n%s", code, out.String(), errOut.String())
		default:
		}
		return pageRe.MatchString(out.String())
	})
	text := out.String()
	for _, re := range []string{
		`This is a simulated Nomad cluster \(nomadsim\); nothing real is restarted`,
		"1\\. Restarting job \"demo-web\" as `nomad job restart` does",
		`2\. Restarting job "demo-web" as nomad-restart does`,
		`\n +nomad job restart +nomad-restart\n`,
		`Fewest instances serving +0 of 4 +3 of 4\n`,
		`Time with none serving +\d+% +0%\n`,
		`Requests failed through a load balancer +[\d,]+ of [\d,]+ \((<1|\d+)%\) +[\d,]+ of [\d,]+ \((<1|\d+)%\)\n`,
		`Nomad's service catalog .*\n.*That catalog has no health`,
		`Restart ended after +[\d.]+s +[\d.]+s\n`,
		`All 4 serving again after +[\d.]+s +[\d.]+s\n`,
		`The simulated cluster stays up until Ctrl-C`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("demo output lacks %s:\n%s", re, text)
		}
	}
	m := statusHint.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no status hint in:\n%s", text)
	}
	e := cliEnv{addr: m[1], localDir: t.TempDir()}
	if rec := statusOf(t, ctx, e, m[2]); rec.Status != restart.StatusSucceeded || rec.Spec.Health == restart.HealthNone {
		t.Errorf("restart %s: %s, health %s", m[2], rec.Status, rec.Spec.Health)
	}
	if page := agenttest.Get(t, pageRe.FindStringSubmatch(text)[1], http.StatusOK); !strings.Contains(page, m[2]) {
		t.Errorf("the page does not show restart %s:\n%s", m[2], page)
	}

	ctrlC()
	if code := <-done; code != 0 {
		t.Fatalf("demo after Ctrl-C: exit %d\n%s", code, errOut.String())
	}
}

// TestDemoBadInput: one line naming the problem and the fix, exit 1, before any cluster
// starts.
func TestDemoBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"web"}, "takes no arguments"},
		{[]string{"-detach"}, "cannot be detached"},
		{[]string{"-dry-run"}, "drop -dry-run"},
		{[]string{"-on-error=ask"}, "the demo asks nothing"},
		{[]string{"-batch-wait=ask"}, "the demo asks nothing"},
		{[]string{"-time-scale=0"}, "Invalid -time-scale value 0"},
		{[]string{"-http-addr=9646"}, `Invalid -http-addr value "9646": want host:port`},
		{[]string{"-batch-size=0"}, "Invalid -batch-size"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runDemo(context.Background(), tc.args...)
			if code != 1 || !strings.Contains(errOut.String(), tc.want) || strings.Count(errOut.String(), "\n") != 1 || out.String() != "" {
				t.Fatalf("demo %q: exit %d\nstderr: %s\nstdout: %s", tc.args, code, errOut.String(), out.String())
			}
		})
	}
}

func TestFiguresOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name    string
		samples []servingSample
		ended   time.Time
		want    servingFigures
	}{
		{"no samples", nil, t0, servingFigures{}},
		{"one sample", []servingSample{{t0, 4}}, t0, servingFigures{MinServing: 4}},
		{"never down", []servingSample{{at(0), 4}, {at(1000), 3}, {at(3000), 4}}, at(3000),
			servingFigures{MinServing: 3, Seconds: 3, RestartSeconds: 3}},
		// None serve from 1 s to 3 s (the sample at 1 s holds until the next): 2 s of 4.
		{"an outage outlasting the restart", []servingSample{{at(0), 4}, {at(1000), 0}, {at(2000), 0}, {at(3000), 2}, {at(4000), 4}}, at(500),
			servingFigures{MinServing: 0, NoneServingShare: 0.5, Seconds: 4, RestartSeconds: 0.5}},
		// Time-weighted, not counted: one long sample of none among many short ones.
		{"weighted by time", []servingSample{{at(0), 2}, {at(100), 2}, {at(200), 0}, {at(2200), 2}}, at(2200),
			servingFigures{MinServing: 0, NoneServingShare: 0.909, Seconds: 2.2, RestartSeconds: 2.2}},
		{"a last sample of none does not count", []servingSample{{at(0), 1}, {at(1000), 0}}, at(1000),
			servingFigures{MinServing: 0, Seconds: 1, RestartSeconds: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := figuresOf(tc.samples, tc.ended); got != tc.want {
				t.Fatalf("figuresOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHealthy(t *testing.T) {
	started := time.Date(2026, 12, 2, 10, 0, 0, 400e6, time.UTC) // the tasks' latest start
	ran := started.Add(time.Second).Truncate(time.Second)        // a probe run in the next second
	check := func(mode, status string) cluster.CheckResult {
		return cluster.CheckResult{Mode: mode, Status: status, Time: ran}
	}
	stale := func(at time.Time) cluster.CheckResult {
		return cluster.CheckResult{Mode: "healthiness", Status: "success", Time: at}
	}
	cases := []struct {
		name   string
		checks []cluster.CheckResult
		want   bool
	}{
		{"passed before the restart", []cluster.CheckResult{stale(started.Add(-5 * time.Second).Truncate(time.Second))}, false},
		{"passed in the second of the start", []cluster.CheckResult{stale(started.Truncate(time.Second))}, false},
		{"no checks", nil, false},
		{"passing", []cluster.CheckResult{check("healthiness", "success")}, true},
		{"failing", []cluster.CheckResult{check("healthiness", "failure")}, false},
		{"not probed yet", []cluster.CheckResult{check("healthiness", "pending")}, false},
		{"one of two failing", []cluster.CheckResult{check("healthiness", "success"), check("healthiness", "failure")}, false},
		{"a failing readiness check does not count", []cluster.CheckResult{check("healthiness", "success"), check("readiness", "failure")}, true},
		{"readiness checks only", []cluster.CheckResult{check("readiness", "success")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := healthy(tc.checks, started); got != tc.want {
				t.Fatalf("healthy = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFailedOf(t *testing.T) {
	cases := map[string]servingFigures{
		"0 of 0 (0%)":                {},
		"412 of 1,020 (40%)":         {Requests: 1020, FailedRequests: 412},
		"1 of 2,900 (<1%)":           {Requests: 2900, FailedRequests: 1},
		"999 of 999 (100%)":          {Requests: 999, FailedRequests: 999},
		"0 of 1,234,567 (0%)":        {Requests: 1234567},
		"100,000 of 1,000,000 (10%)": {Requests: 1000000, FailedRequests: 100000},
	}
	for want, f := range cases {
		if got := failedOf(f); got != want {
			t.Errorf("failedOf(%+v) = %q, want %q", f, got, want)
		}
	}
}

func TestSharePercent(t *testing.T) {
	for share, want := range map[float64]string{0: "0%", 0.001: "<1%", 0.005: "<1%", 0.01: "1%", 0.5: "50%", 0.987: "99%", 1: "100%"} {
		if got := sharePercent(share); got != want {
			t.Errorf("sharePercent(%v) = %q, want %q", share, got, want)
		}
	}
}

// TestAsNomadDoes keeps what the operator chose (batches, tasks) and takes Nomad's gate:
// none, with no availability budget and no surge.
func TestAsNomadDoes(t *testing.T) {
	two := restart.BatchSize{N: 2}
	in := restart.Spec{BatchSizes: []restart.BatchSize{two}, Health: restart.HealthChecks, MaxUnavailable: &two, Surge: 1, Tasks: []string{"server"}}
	got := asNomadDoes(in)
	if got.Health != restart.HealthNone || got.MaxUnavailable == nil || *got.MaxUnavailable != (restart.BatchSize{N: 100, Percent: true}) || got.Surge != 0 {
		t.Fatalf("asNomadDoes = %+v", got)
	}
	if len(got.BatchSizes) != 1 || got.BatchSizes[0] != two || got.Tasks[0] != "server" || in.Health != restart.HealthChecks || *in.MaxUnavailable != two {
		t.Fatalf("asNomadDoes changed the operator's options or its input: %+v, input %+v", got, in)
	}
}
