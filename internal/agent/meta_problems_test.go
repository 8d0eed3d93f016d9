package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestConfigChangeMetaProblemLoggedOnce: a job's invalid nomad-restart meta is logged when
// it appears and when it changes, not at every change of the job list (an operator's log
// once filled with the same lines, 308 in 15 minutes for 7 problems); its fix is logged
// once; the gauge of meta problems holds their current count.
func TestConfigChangeMetaProblemLoggedOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime})
	ctx := agenttest.Context(t)
	path := "nomad/jobs/a-bad/config"
	agenttest.PutVar(t, e.Client, path, "v1", 0)
	// "a-" and "z-": the job list is in ID order, and the agent goes through it in order, so
	// that when it has read a job "z-..." it has gone past "a-bad" in that same list.
	bad := templatedJob("a-bad", 1, agenttest.GreetingTemplate(path), rolloutMeta("1s", "nomad-restart.batch-size", "zero"))
	submitTemplated(t, e, bad, 1)

	logs := &recordLog{}
	net := &agentNet{}
	a := runLoggedAgent(t, e, net, logs)
	gauge := a.metrics.changeMetrics().metaProblems

	const warning = "invalid nomad-restart meta: the group is not rolled until it is fixed"
	problem := func(value string) string {
		return fmt.Sprintf(`job meta nomad-restart.batch-size = %q`, value)
	}
	others := 0
	// listChanges changes the job list n times with jobs of no concern, each time until the
	// agent has gone through the list past a-bad.
	listChanges := func(n int) {
		t.Helper()
		for range n {
			others++
			id := fmt.Sprintf("z-other-%d", others)
			if _, err := e.Sim.RegisterJob(simtest.Job(id, api.JobTypeService, 1, "")); err != nil {
				t.Fatal(err)
			}
			simtest.WaitFor(t, ctx, "the agent to read job "+id, func() bool { return net.asked("/v1/job/" + id) })
		}
	}

	simtest.WaitFor(t, ctx, "the warning of a-bad's meta", func() bool { return logs.count(warning, problem("zero")) == 1 })
	if v := gaugeValue(gauge); v != 1 {
		t.Errorf("meta problems gauge %v, want 1", v)
	}
	listChanges(3)
	if n := logs.count(warning, ""); n != 1 {
		t.Errorf("after 3 changes of the job list: %d warnings of invalid meta, want 1:\n%s", n, logs.dump())
	}

	// The value changes: warned once more, with the new value, and still one problem.
	bad.Meta["nomad-restart.batch-size"] = "none"
	if _, err := e.Sim.RegisterJob(bad); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, ctx, "the warning of a-bad's new value", func() bool { return logs.count(warning, problem("none")) == 1 })
	listChanges(2)
	if n, fixed := logs.count(warning, ""), logs.count("nomad-restart meta fixed", ""); n != 2 || fixed != 0 {
		t.Errorf("after the value changed: %d warnings of invalid meta (want 2), %d fixed (want 0):\n%s", n, fixed, logs.dump())
	}
	if v := gaugeValue(gauge); v != 1 {
		t.Errorf("meta problems gauge %v, want 1", v)
	}

	// Fixed: said once, and the gauge is back to 0.
	bad.Meta["nomad-restart.batch-size"] = "1"
	if _, err := e.Sim.RegisterJob(bad); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, ctx, "the fix of a-bad's meta to be logged", func() bool { return logs.count("nomad-restart meta fixed", problem("none")) == 1 })
	listChanges(2)
	if n, fixed := logs.count(warning, ""), logs.count("nomad-restart meta fixed", ""); n != 2 || fixed != 1 {
		t.Errorf("after the fix: %d warnings of invalid meta (want 2), %d fixed (want 1):\n%s", n, fixed, logs.dump())
	}
	if v := gaugeValue(gauge); v != 0 {
		t.Errorf("meta problems gauge %v after the fix, want 0", v)
	}
}

// TestConfigChangeUnreadableSpecLoggedOnce: a job whose specification the agent's token may
// not read is warned about once, not at every change of the job list (the read is still
// tried each time); when it can be read again, that is said once.
func TestConfigChangeUnreadableSpecLoggedOnce(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime})
	ctx := agenttest.Context(t)
	if _, err := e.Sim.RegisterJob(simtest.Job("a-secret", api.JobTypeService, 1, "")); err != nil {
		t.Fatal(err)
	}
	logs := &recordLog{}
	net := &agentNet{}
	net.deny("/v1/job/a-secret", true)
	runLoggedAgent(t, e, net, logs)

	const warning = "reading a job's specification for config-change rollouts"
	simtest.WaitFor(t, ctx, "the warning of a-secret's specification", func() bool { return logs.count(warning, "a-secret") == 1 })
	for i := range 3 { // three changes of the job list, each read past a-secret (ID order)
		id := fmt.Sprintf("z-other-%d", i)
		if _, err := e.Sim.RegisterJob(simtest.Job(id, api.JobTypeService, 1, "")); err != nil {
			t.Fatal(err)
		}
		simtest.WaitFor(t, ctx, "the agent to read job "+id, func() bool { return net.asked("/v1/job/" + id) })
	}
	if n := logs.count(warning, "a-secret"); n != 1 {
		t.Errorf("after 3 changes of the job list: %d warnings, want 1:\n%s", n, logs.dump())
	}

	net.deny("/v1/job/a-secret", false)
	if _, err := e.Sim.RegisterJob(simtest.Job("z-last", api.JobTypeService, 1, "")); err != nil {
		t.Fatal(err)
	}
	const again = "a job's specification can be read again for config-change rollouts"
	simtest.WaitFor(t, ctx, "a-secret to be read again", func() bool { return logs.count(again, "a-secret") == 1 })
	if n := logs.count(warning, "a-secret"); n != 1 {
		t.Errorf("after the denial was lifted: %d warnings, want 1:\n%s", n, logs.dump())
	}
}

// recordLog is a slog handler that keeps every record's message and attributes as text.
type recordLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l *recordLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recordLogView{l: l, attrs: attrs}
}

func (l *recordLog) WithGroup(string) slog.Handler { return l }

// count counts the records whose message is msg and whose text contains with.
func (l *recordLog) count(msg, with string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, " "+msg) && strings.Contains(line, with) {
			n++
		}
	}
	return n
}

func (l *recordLog) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// recordLogView is the recordLog with attributes added (Logger.With).
type recordLogView struct {
	l     *recordLog
	attrs []slog.Attr
}

func (v *recordLogView) Enabled(context.Context, slog.Level) bool { return true }

func (v *recordLogView) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(v.attrs...)
	return v.l.Handle(ctx, r)
}

func (v *recordLogView) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recordLogView{l: v.l, attrs: append(append([]slog.Attr{}, v.attrs...), attrs...)}
}

func (v *recordLogView) WithGroup(string) slog.Handler { return v }

func gaugeValue(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil || m.Gauge == nil {
		return -1
	}
	return m.Gauge.GetValue()
}

// runLoggedAgent runs an agent of the bootstrap token that sends its requests through net,
// logs to logs and rolls out config changes, watching their sources through net too.
func runLoggedAgent(t *testing.T, e *env, net *agentNet, logs *recordLog) *Agent {
	t.Helper()
	token := e.Sim.BootstrapToken()
	a := e.newAgent(t, "agent-1", token, func(c *Config) {
		net.wire(t, e, c, token)
		c.Logger = slog.New(logs)
		rollingOn(e, sourcewatch.New(nomadvars.New(net.client, nomadvars.Options{}), sourcewatch.Options{}))(c)
	})
	agenttest.Run(t, a)
	return a
}
