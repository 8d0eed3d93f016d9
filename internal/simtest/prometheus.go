package simtest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Prometheus is a real Prometheus server (Debian's prometheus package) a test started.
type Prometheus struct {
	// Addr is its host:port on loopback.
	Addr string
	logs *SyncBuffer
}

// URL is its base URL, for -prometheus-address.
func (p *Prometheus) URL() string { return "http://" + p.Addr }

// Logs is what it wrote so far.
func (p *Prometheus) Logs() string { return p.logs.String() }

// StartPrometheus runs Prometheus on a free loopback port with its own configuration and
// storage (nothing of Debian's service: not its config, not port 9090), scraping each
// target (host:port, path /metrics) every second with the targets' own job labels kept,
// and returns once it is ready. It is killed when the test ends. The tests that gate on
// metrics need it as the page's tests need Chromium: scripts/test installs it.
func StartPrometheus(t testing.TB, targets ...string) *Prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("no prometheus found: install Debian's prometheus package (scripts/test does it when run as root)")
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	// honor_labels keeps the targets' own job label: the gates select by it.
	yml := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: service
    honor_labels: true
    static_configs:
      - targets: ['%s']
`, strings.Join(targets, "', '"))
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{Addr: ClosedAddr(t), logs: &SyncBuffer{}}
	cmd := exec.Command(bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.Addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting Prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("Prometheus's log:\n%s", p.Logs())
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.URL() + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("Prometheus exited before it was ready:\n%s", p.Logs())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus at %s not ready after 20s:\n%s", p.Addr, p.Logs())
		}
	}
}
