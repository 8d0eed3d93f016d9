package agent_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cli"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// childEnv marks the test binary re-executed as the nomad-restart command, so that drivers
// and agents are real processes (SIGKILL and SIGTERM are real) without a separate build.
const childEnv = "NOMAD_RESTART_AGENT_TEST_CHILD"

func TestMain(m *testing.M) {
	simtest.MainOrChild(m, childEnv, func(ctx context.Context) int {
		return cli.Run(ctx, os.Args[1:], strings.NewReader(""), os.Stdout, os.Stderr, os.Getenv)
	})
}

type proc struct {
	cmd  *exec.Cmd
	out  simtest.SyncBuffer
	done chan struct{}
	err  error
}

func (p *proc) output() string { return p.out.String() }

// spawn runs `nomad-restart args...` against the cluster at addr, with its local store
// under stateHome.
func spawn(t *testing.T, addr, stateHome string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), childEnv+"=1", "NOMAD_ADDR="+addr, "NOMAD_TOKEN=", "NOMAD_NAMESPACE=",
		"NOMAD_REGION=", "XDG_STATE_HOME="+stateHome, "NOMAD_RESTART_LOG_LEVEL=")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting nomad-restart %v: %v", args, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %v: %v", sig, err)
	}
}

// exitCode waits for the process and returns its exit code (-1 when killed by a signal).
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(agenttest.Timeout):
		t.Fatalf("process did not exit; output:\n%s", p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("waiting for the process: %v", p.err)
	}
	return 0
}

// slowStart makes each task take 10 simulated seconds to start: each restart stays in
// flight ~0.5 s of real time, so that a restart is surely mid-way when a test kills or
// stops its driver.
var slowStart = map[string]string{"nomadsim.start_delay": "10s"}

// startProcEnv starts a simulated cluster, with job web of count slow allocations running.
func startProcEnv(t *testing.T, count int) *agenttest.Env {
	t.Helper()
	// Slower than simtest.TimeScale, so that slowStart keeps a restart in flight ~0.5 s.
	e := agenttest.StartEnv(t, nomadsim.Options{TimeScale: 20, Seed: 3})
	e.Register(t, "default", "web", count, slowStart)
	return e
}

// A `nomad-restart run` process SIGKILLed mid-restart (local store: its file lock dies with
// it) is succeeded by a `nomad-restart agent` process, which finishes the restart exactly
// once and exits 0 on SIGTERM.
func TestProcessAgentAdoptsAfterCLIDriverSIGKILL(t *testing.T) {
	t.Parallel()
	e := startProcEnv(t, 4)
	home := t.TempDir()
	local, err := localstore.New(filepath.Join(home, "nomad-restart"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := agenttest.Context(t)

	driver := spawn(t, e.Sim.Addr(), home, "run", "-state", "local", "-batch-size", "1", "-yes", "web")
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "the CLI driver to restart an allocation", func() bool {
		recs, err := local.List(ctx, store.Filter{JobID: "web"})
		if err != nil || len(recs) == 0 {
			return false
		}
		rec = recs[0]
		return rec.Progress(time.Now()).Done >= 1 && !rec.Status.Terminal()
	})
	driver.signal(t, syscall.SIGKILL)
	if code := driver.exitCode(t); code != -1 {
		t.Fatalf("the driver exited %d before the kill; output:\n%s", code, driver.output())
	}

	agentProc := spawn(t, e.Sim.Addr(), home, "agent", "-state", "local", "-http-addr", "", "-log-format", "json")
	final := agenttest.WaitEnd(t, local, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s); agent output:\n%s", final.Status, final.Reason, agentProc.output())
	}
	if !strings.Contains(agenttest.EventLines(final), "took over") {
		t.Errorf("no takeover recorded in the events:\n%s", agenttest.EventLines(final))
	}
	e.CheckOnce(t, final)
	agentProc.signal(t, syscall.SIGTERM)
	if code := agentProc.exitCode(t); code != 0 {
		t.Errorf("agent exited %d on SIGTERM; output:\n%s", code, agentProc.output())
	}
}

// Two agent processes on the Nomad store: SIGTERM to the one driving a restart makes it
// detach and release the lease; the other takes over at once (no lease TTL to wait for).
func TestProcessSIGTERMHandover(t *testing.T) {
	t.Parallel()
	e := startProcEnv(t, 8)
	home := t.TempDir()
	ctx := agenttest.Context(t)

	first := spawn(t, e.Sim.Addr(), home, "agent", "-http-addr", "", "-log-format", "json")
	// File the restart for the agents, as `run -detach` does.
	filer := spawn(t, e.Sim.Addr(), home, "run", "-detach", "-state", "nomad", "-batch-size", "1", "web")
	if code := filer.exitCode(t); code != 0 {
		t.Fatalf("run -detach exited %d:\n%s", code, filer.output())
	}
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "the first agent to restart an allocation", func() bool {
		recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "web"})
		if err != nil || len(recs) == 0 {
			return false
		}
		rec = recs[0]
		return rec.Progress(time.Now()).Done >= 1
	})
	if rec.Status.Terminal() {
		t.Fatalf("the restart ended before the handover could be tested (%s)", rec.Status)
	}
	second := spawn(t, e.Sim.Addr(), home, "agent", "-http-addr", "", "-log-format", "json")
	first.signal(t, syscall.SIGTERM)
	if code := first.exitCode(t); code != 0 {
		t.Fatalf("first agent exited %d on SIGTERM; output:\n%s", code, first.output())
	}
	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	events := agenttest.EventLines(final)
	if !strings.Contains(events, "detached") || !strings.Contains(events, "took over") {
		t.Errorf("want a detach then a takeover in the events:\n%s", events)
	}
	e.CheckOnce(t, final)
	second.signal(t, syscall.SIGTERM)
	if code := second.exitCode(t); code != 0 {
		t.Errorf("second agent exited %d; output:\n%s", code, second.output())
	}
}
