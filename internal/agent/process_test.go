package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cli"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// childEnv marks the test binary re-executed as the nomad-restart command, so that drivers
// and agents are real processes (SIGKILL and SIGTERM are real) without a separate build.
const childEnv = "NOMAD_RESTART_AGENT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], strings.NewReader(""), os.Stdout, os.Stderr, os.Getenv)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const procTimeout = 90 * time.Second

type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// spawn runs `nomad-restart args...` against the cluster at addr, with its local store
// under stateHome.
func spawn(t *testing.T, addr, stateHome string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), childEnv+"=1", "NOMAD_ADDR="+addr, "NOMAD_TOKEN=", "NOMAD_NAMESPACE=",
		"NOMAD_REGION=", "XDG_STATE_HOME="+stateHome, "NOMAD_RESTART_LOG_LEVEL=")
	p.cmd.Stdout, p.cmd.Stderr = p, p
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
	case <-time.After(procTimeout):
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

func ptr[T any](v T) *T { return &v }

func registerSlow(t *testing.T, sim *nomadsim.Cluster, client *api.Client, id string, count int) {
	t.Helper()
	job := &api.Job{ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"dc1", "dc2"}, Region: ptr("global")}
	tg := api.NewTaskGroup("web", count)
	task := api.NewTask("main", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh"}
	// 10 simulated seconds to start: each restart stays in flight ~0.5 s of real time, so
	// that a restart is surely mid-way when a test kills or stops its driver.
	task.Meta = map[string]string{"nomadsim.start_delay": "10s"}
	task.Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(16)})
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	if _, err := sim.RegisterJob(job); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), procTimeout)
	defer cancel()
	nc := cluster.NewNomad(client)
	until(t, ctx, "the job to run and its deployment to end", func() bool {
		stubs, _, err := client.Jobs().Allocations(id, false, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil || len(stubs) != count {
			return false
		}
		for _, a := range stubs {
			if a.ClientStatus != api.AllocClientStatusRunning {
				return false
			}
		}
		d, err := nc.ActiveDeployment(ctx, "default", id)
		return err == nil && d == nil
	})
}

// until polls cond (test code only) until it holds.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func doneCount(r *restart.Record) int {
	n := 0
	for _, a := range r.Allocs {
		if a.State == restart.AllocDone {
			n++
		}
	}
	return n
}

func waitTerminal(t *testing.T, st store.Store, ns, id string, after uint64) *restart.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procTimeout)
	defer cancel()
	for {
		r, err := st.Watch(ctx, ns, id, after)
		if err != nil {
			t.Fatalf("restart %s did not end: %v", id, err)
		}
		if r.Status.Terminal() {
			return r
		}
		after = r.ModifyIndex
	}
}

func checkOnce(t *testing.T, client *api.Client, rec *restart.Record) {
	t.Helper()
	var ids []string
	for _, a := range rec.Allocs {
		ids = append(ids, a.ID)
	}
	simtest.CheckOnce(t, client, rec.Namespace, rec.JobID, ids, false, procTimeout)
}

// A `nomad-restart run` process SIGKILLed mid-restart (local store: its file lock dies with
// it) is succeeded by a `nomad-restart agent` process, which finishes the restart exactly
// once and exits 0 on SIGTERM.
func TestProcessAgentAdoptsAfterCLIDriverSIGKILL(t *testing.T) {
	t.Parallel()
	sim, client := simtest.StartWithClient(t, nomadsim.Options{TimeScale: 20, Seed: 3})
	registerSlow(t, sim, client, "web", 4)
	home := t.TempDir()
	local, err := store.NewLocal(filepath.Join(home, "nomad-restart"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), procTimeout)
	defer cancel()

	driver := spawn(t, sim.Addr(), home, "run", "-state", "local", "-batch-size", "1", "-yes", "web")
	var rec *restart.Record
	until(t, ctx, "the CLI driver to restart an allocation", func() bool {
		recs, err := local.List(ctx, store.Filter{JobID: "web"})
		if err != nil || len(recs) == 0 {
			return false
		}
		rec = recs[0]
		return doneCount(rec) >= 1 && !rec.Status.Terminal()
	})
	driver.signal(t, syscall.SIGKILL)
	if code := driver.exitCode(t); code != -1 {
		t.Fatalf("the driver exited %d before the kill; output:\n%s", code, driver.output())
	}

	agentProc := spawn(t, sim.Addr(), home, "agent", "-state", "local", "-http-addr", "", "-log-format", "json")
	final := waitTerminal(t, local, rec.Namespace, rec.ID, 0)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s); agent output:\n%s", final.Status, final.Reason, agentProc.output())
	}
	if !strings.Contains(eventText(final), "took over") {
		t.Errorf("no takeover recorded in the events:\n%s", eventText(final))
	}
	checkOnce(t, client, final)
	agentProc.signal(t, syscall.SIGTERM)
	if code := agentProc.exitCode(t); code != 0 {
		t.Errorf("agent exited %d on SIGTERM; output:\n%s", code, agentProc.output())
	}
}

// Two agent processes on the Nomad store: SIGTERM to the one driving a restart makes it
// detach and release the lease; the other takes over at once (no lease TTL to wait for).
func TestProcessSIGTERMHandover(t *testing.T) {
	t.Parallel()
	sim, client := simtest.StartWithClient(t, nomadsim.Options{TimeScale: 20, Seed: 3})
	registerSlow(t, sim, client, "web", 8)
	home := t.TempDir()
	st := store.NewNomad(client, store.NomadOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), procTimeout)
	defer cancel()

	first := spawn(t, sim.Addr(), home, "agent", "-http-addr", "", "-log-format", "json")
	// File the restart for the agents, as `run -detach` does.
	filer := spawn(t, sim.Addr(), home, "run", "-detach", "-state", "nomad", "-batch-size", "1", "web")
	if code := filer.exitCode(t); code != 0 {
		t.Fatalf("run -detach exited %d:\n%s", code, filer.output())
	}
	var rec *restart.Record
	until(t, ctx, "the first agent to restart an allocation", func() bool {
		recs, err := st.List(ctx, store.Filter{Namespace: "default", JobID: "web"})
		if err != nil || len(recs) == 0 {
			return false
		}
		rec = recs[0]
		return doneCount(rec) >= 1
	})
	if rec.Status.Terminal() {
		t.Fatalf("the restart ended before the handover could be tested (%s)", rec.Status)
	}
	second := spawn(t, sim.Addr(), home, "agent", "-http-addr", "", "-log-format", "json")
	first.signal(t, syscall.SIGTERM)
	if code := first.exitCode(t); code != 0 {
		t.Fatalf("first agent exited %d on SIGTERM; output:\n%s", code, first.output())
	}
	final := waitTerminal(t, st, rec.Namespace, rec.ID, 0)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	events := eventText(final)
	if !strings.Contains(events, "detached") || !strings.Contains(events, "took over") {
		t.Errorf("want a detach then a takeover in the events:\n%s", events)
	}
	checkOnce(t, client, final)
	second.signal(t, syscall.SIGTERM)
	if code := second.exitCode(t); code != 0 {
		t.Errorf("second agent exited %d; output:\n%s", code, second.output())
	}
}

func eventText(r *restart.Record) string {
	var b strings.Builder
	for _, e := range r.Events {
		fmt.Fprintf(&b, "%s %s\n", e.Type, e.Message)
	}
	return b.String()
}
