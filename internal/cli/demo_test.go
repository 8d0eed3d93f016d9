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
func runDemo(ctx context.Context, args ...string) (code int, out, errOut *syncBuffer) {
	out, errOut = &syncBuffer{}, &syncBuffer{}
	a := newApp(strings.NewReader(""), out, errOut, func(string) string { return "" })
	return a.run(ctx, append([]string{"demo"}, args...)), out, errOut
}

// TestDemoJSON runs `demo -json` and checks its one JSON object: measured on the simulated
// cluster, Nomad's way leaves no instance serving for a while (the 4 instances are
// restarted within a fraction of the 3 s each needs to serve again), nomad-restart's keeps
// 3 of 4 serving throughout and takes at least 4 times those 3 s.
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
	out, errOut := &syncBuffer{}, &syncBuffer{}
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
	if page := httpGet(t, ctx, pageRe.FindStringSubmatch(text)[1]); !strings.Contains(page, m[2]) {
		t.Errorf("the page does not show restart %s:\n%s", m[2], page)
	}

	ctrlC()
	if code := <-done; code != 0 {
		t.Fatalf("demo after Ctrl-C: exit %d\n%s", code, errOut.String())
	}
}

// httpGet reads url and returns its body, which must come with 200.
func httpGet(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}
