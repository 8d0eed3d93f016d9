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
	"github.com/nomad-restart/nomad-restart/internal/demo"
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
// balancer (Consul's passing instances read as Traefik does), requests fail Nomad's way,
// and none nomad-restart's: it drains each instance until the balancer's API no longer
// lists it.
func TestDemoJSON(t *testing.T) {
	ctx := demoCtx(t)
	code, out, errOut := runDemo(ctx, "-json", "-time-scale=2")
	if code != 0 {
		t.Fatalf("demo -json: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	dec := json.NewDecoder(strings.NewReader(out.String()))
	var got struct {
		Count        int          `json:"count"`
		Nomad        demo.Figures `json:"nomad"`
		NomadRestart demo.Figures `json:"nomad_restart"`
	}
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("demo -json is not JSON: %v\n%s", err, out.String())
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		t.Fatalf("demo -json printed more than one JSON object: %v\n%s", err, out.String())
	}
	n, g := got.Nomad, got.NomadRestart
	if got.Count != demo.Count {
		t.Errorf("count %d, want %d", got.Count, demo.Count)
	}
	if g.MinServing != demo.Count-1 || g.NoneServingShare != 0 {
		t.Errorf("nomad-restart: %+v; want %d serving at least and never none", g, demo.Count-1)
	}
	if n.MinServing != 0 || n.NoneServingShare <= 0.3 {
		t.Errorf("as Nomad does: %+v; want none serving for a good share of the time", n)
	}
	serveAfter := (demo.StartDelay + demo.WarmUp).Seconds()
	if n.Seconds < serveAfter || g.Seconds < demo.Count*serveAfter || n.RestartSeconds > n.Seconds || g.RestartSeconds > g.Seconds {
		t.Errorf("times: as Nomad does %+v, nomad-restart %+v: an instance needs %.0fs to serve again", n, g, serveAfter)
	}
	if n.RestartID == "" || g.RestartID == "" || n.RestartID == g.RestartID {
		t.Errorf("restart IDs %q and %q", n.RestartID, g.RestartID)
	}
	for name, f := range map[string]demo.Figures{"as Nomad does": n, "nomad-restart": g} {
		if f.Requests <= 0 || f.FailedRequests < 0 || f.FailedRequests > f.Requests {
			t.Errorf("%s: %d of %d requests failed; want some requests, and no more failed than sent", name, f.FailedRequests, f.Requests)
		}
	}
	if n.FailedRequests == 0 {
		t.Errorf("as Nomad does: no request of %d failed, with no instance serving for %.0f%% of the time", n.Requests, 100*n.NoneServingShare)
	}
	if g.FailedRequests != 0 {
		t.Errorf("nomad-restart failed %d of %d requests, want none", g.FailedRequests, g.Requests)
	}
	if failedShare(g) >= failedShare(n) {
		t.Errorf("nomad-restart failed %d of %d requests, as Nomad does %d of %d: want a smaller share",
			g.FailedRequests, g.Requests, n.FailedRequests, n.Requests)
	}
}

// failedShare is the share of f's requests that failed.
func failedShare(f demo.Figures) float64 {
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
		`A load balancer reads its passing instances from Consul as Traefik does, every 5s`,
		`Each allocation was first drained: until Traefik at http://127\.0\.0\.1:\d+ no longer sends to it`,
		`(?m)^  Drained: Traefik at http://127\.0\.0\.1:\d+ no longer sent to 127\.0\.0\.1:\d+ after `,
		`Requests failed through a load balancer +[\d,]+ of [\d,]+ \((<1|\d+)%\) +0 of [\d,]+ \(0%\)\n`,
		`Behind Nomad's own service provider, whose catalog has no health`,
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
