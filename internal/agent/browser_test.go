package agent

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nomad-restart/nomad-restart/internal/restart"
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

// The web page in a real browser: the list shows the restart with its progress bar, the
// page refreshes by itself until the bar is full and the status succeeded, and the link
// leads to the per-allocation detail.
func TestWebPageInHeadlessChromium(t *testing.T) {
	t.Parallel()
	chrome := browserPath(t)
	e := startEnv(t, nomadsim.Options{})
	e.register(t, "default", "web", 4, map[string]string{"nomadsim.start_delay": "10s"})
	rec := e.detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, testTimeout)
	defer cancel()

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

	start(t, a)
	// The page reloads itself (meta refresh): wait, without navigating, for a full bar.
	seen := map[string]bool{}
	js := `(function(){const r=document.querySelector('` + row + `');if(!r)return '';` +
		`return r.querySelector('[role="progressbar"]').getAttribute('aria-valuenow')+' '+r.querySelector('.st').textContent;})()`
	for {
		// A reload may be under way: an evaluation that fails is tried again.
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil && ctx.Err() != nil {
			t.Fatalf("the page never showed the restart finished; seen %v: %v", seen, err)
		}
		if got != "" {
			seen[got] = true
		}
		if got == "100 succeeded" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page never showed the restart finished; seen %v", seen)
		case <-time.After(100 * time.Millisecond):
		}
	}

	// Follow the link to the detail page.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+` a`)), chromedp.WaitVisible(chromedp.CSS(`#allocs`))); err != nil {
		t.Fatalf("opening the restart's page: %v", err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	states, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#allocs tr.alloc')).map(r => r.dataset.state)`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(title, rec.ID[:8]) {
		t.Errorf("detail page title %q lacks the restart's ID", title)
	}
	if len(states) != 4 {
		t.Fatalf("detail page lists %d allocations, want 4", len(states))
	}
	for i, s := range states {
		if s != string(restart.AllocDone) {
			t.Errorf("allocation %d shown %q, want done", i, s)
		}
	}
}
