package simtest

import (
	"fmt"
	"net"
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
	runServer(t, "Prometheus", cmd, p.logs, p.URL()+"/-/ready", "")
	return p
}

// runServer starts cmd, a server for the test, its output into logs, and waits, up to 20 s,
// until a GET of readyURL answers 200. It is killed when the test ends, its log (and
// config, when given) shown if the test failed.
func runServer(t testing.TB, name string, cmd *exec.Cmd, logs *SyncBuffer, readyURL, config string) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = logs, logs
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
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
			t.Logf("%s's configuration:\n%s\nits log:\n%s", name, config, logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it was ready:\n%s", name, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s after 20s:\n%s", name, readyURL, logs.String())
		}
	}
}

// HAProxy is a real HAProxy (Debian's haproxy package) a test started.
type HAProxy struct {
	// Frontend is the host:port its clients send to; Stats the URL of its stats page
	// (with "stats show-legends", so that its CSV lists the servers' addresses); Socket
	// the path of its runtime API ("stats socket ... level admin").
	Frontend, Stats, Socket string
	logs                    *SyncBuffer
}

// Logs is what it wrote so far.
func (h *HAProxy) Logs() string { return h.logs.String() }

// Command sends one command to its runtime API and returns the answer.
func (h *HAProxy) Command(t testing.TB, cmd string) string {
	t.Helper()
	conn, err := net.DialTimeout("unix", h.Socket, 5*time.Second)
	if err != nil {
		t.Fatalf("HAProxy's runtime API: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\n", cmd); err != nil {
		t.Fatalf("HAProxy's runtime API, %q: %v", cmd, err)
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// StartHAProxy runs HAProxy in the foreground with its own configuration: a frontend on a
// free loopback port sending to backend "web", whose lines the test gives (servers,
// server-template, balance), beside a stats page and a runtime API of its own, and the
// extra sections given (resolvers). It returns once the stats page answers; it is killed
// when the test ends. The tests of balancers need it as the gates' need Prometheus:
// scripts/test installs it.
func StartHAProxy(t testing.TB, backend, extra string) *HAProxy {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("no haproxy found: install Debian's haproxy package (scripts/test does it when run as root)")
	}
	dir := t.TempDir()
	h := &HAProxy{Frontend: ClosedAddr(t), Socket: filepath.Join(dir, "admin.sock"), logs: &SyncBuffer{}}
	statsAddr := ClosedAddr(t)
	h.Stats = "http://" + statsAddr + "/stats"
	cfg := fmt.Sprintf(`global
  stats socket %s mode 600 level admin
defaults
  mode http
  timeout connect 1s
  timeout client 10s
  timeout server 10s
frontend stats
  bind %s
  stats enable
  stats uri /stats
  stats show-legends
frontend front
  bind %s
  default_backend web
backend web
%s
%s
`, h.Socket, statsAddr, h.Frontend, backend, extra)
	config := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	runServer(t, "HAProxy", exec.Command(bin, "-db", "-f", config), h.logs, h.Stats+";csv", cfg)
	return h
}
