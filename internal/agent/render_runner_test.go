package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// computedTemplate reads a variable through a path computed at render time: nothing the
// agent can watch by path, so only its re-renders say that it changed (as for a Vault
// secret).
const computedTemplate = `{{ with nomadVar (printf "nomad/jobs/%s/config" (env "NOMAD_JOB_NAME")) }}{{ .greeting }}{{ end }}`

// renderMeta opts in to rollouts on re-renders, with the shortest render-interval.
func renderMeta(consent string) map[string]string {
	return map[string]string{"nomad-restart.on-change": consent, "nomad-restart.debounce": "2s",
		"nomad-restart.health": "running", "nomad-restart.render-interval": "5s"}
}

// followingRenders is rollingOn with the allocations' files read through the agent's client.
func followingRenders(e *env, files cluster.FileReader) func(*Config) {
	return func(c *Config) {
		rollingOn(e, sourcewatch.New(e.Vars, sourcewatch.Options{}))(c)
		c.Changes.Files = files
	}
}

func jobRollouts(t *testing.T, ctx context.Context, e *env, job string) []*restart.Record {
	t.Helper()
	recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// Nomad re-renders a change_mode noop template whose source cannot be watched by path, in
// two of three allocations, seconds apart: one rollout restarts those two, each once, and
// names the template; the third is left alone, and nothing more is filed afterwards.
func TestRolloutOnReRenders(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime})
	ctx := agenttest.Context(t)
	submitTemplated(t, e, templatedJob("secrets", 3, computedTemplate, renderMeta("auto")), 3)
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), followingRenders(e, cluster.NewNomad(e.Client)))
	defer agenttest.Run(t, a)()

	allocs, _, err := e.Client.Jobs().Allocations("secrets", false, nil)
	if err != nil || len(allocs) != 3 {
		t.Fatalf("allocations %d, %v", len(allocs), err)
	}
	rendered := []string{allocs[0].ID, allocs[1].ID}
	for _, id := range rendered {
		e.Sim.RerenderAllocTemplate(id, "main", "local/config.txt")
		time.Sleep(time.Second) // renders land per allocation, seconds apart
	}
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "the rollout of the re-renders", func() bool {
		if recs := jobRollouts(t, ctx, e, "secrets"); len(recs) > 0 {
			rec = recs[0]
		}
		return rec != nil
	})
	final := e.WaitSucceeded(t, rec)
	var planned []string
	for _, pa := range final.Allocs {
		planned = append(planned, pa.ID)
	}
	slices.Sort(planned)
	slices.Sort(rendered)
	if !slices.Equal(planned, rendered) {
		t.Fatalf("the rollout planned %v, want the re-rendered %v", planned, rendered)
	}
	if len(final.Triggers) != 1 || final.Triggers[0].Source != "rendered:main/local/config.txt" || final.Triggers[0].Allocs != 2 {
		t.Errorf("triggers %+v, want the template, in 2 allocations", final.Triggers)
	}
	counts, err := simtest.CountRestarts(ctx, e.Client, "default", "secrets")
	if err != nil {
		t.Fatal(err)
	}
	for _, al := range allocs {
		want := 0
		if slices.Contains(rendered, al.ID) {
			want = 1
		}
		if n := counts.InPlace[al.ID]; n != want {
			t.Errorf("allocation %s restarted %d times, want %d", al.ID, n, want)
		}
	}
	// Two more reads of the files: the restarted tasks started after the render.
	time.Sleep(11 * time.Second)
	if recs := jobRollouts(t, ctx, e, "secrets"); len(recs) != 1 {
		t.Errorf("%d restarts recorded, want the one rollout", len(recs))
	}
}

// A change_mode signal template is followed by the task events Nomad records at its
// re-render, without reading any file.
func TestRolloutOnSignalledReRenders(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime})
	ctx := agenttest.Context(t)
	job := templatedJob("signalled", 2, computedTemplate, renderMeta("rendered"))
	tmpl := job.TaskGroups[0].Tasks[0].Templates[0]
	tmpl.ChangeMode, tmpl.ChangeSignal = new("signal"), new("SIGHUP")
	submitTemplated(t, e, job, 2)
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), followingRenders(e, nil))
	defer agenttest.Run(t, a)()

	if n := e.Sim.RerenderTemplates("default", "signalled", "local/config.txt", time.Second); n != 2 {
		t.Fatalf("%d templates re-rendered, want 2", n)
	}
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "the rollout of the signalled re-renders", func() bool {
		if recs := jobRollouts(t, ctx, e, "signalled"); len(recs) > 0 {
			rec = recs[0]
		}
		return rec != nil
	})
	if final := e.WaitSucceeded(t, rec); len(final.Allocs) != 2 || len(final.Triggers) != 1 || final.Triggers[0].Allocs != 2 {
		t.Errorf("the rollout planned %d allocations with triggers %+v, want both", len(final.Allocs), final.Triggers)
	}
}

// An agent whose token lacks read-fs reads no file: it logs and counts it, and restarts
// nothing on a guess.
func TestReRendersWithoutReadFSRestartNothing(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime, ACLs: true})
	ctx := agenttest.Context(t)
	submitTemplated(t, e, templatedJob("locked", 2, computedTemplate, renderMeta("auto")), 2)
	// The shipped agent policy without read-fs.
	rules, err := os.ReadFile(filepath.Join("..", "..", "deploy", "agent-policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	withoutReadFS := strings.Replace(string(rules), `, "read-fs"]`, `]`, 1)
	if withoutReadFS == string(rules) {
		t.Fatal("deploy/agent-policy.hcl grants no read-fs to take away")
	}
	token, err := e.Sim.CreateToken("no-read-fs", map[string]string{"agent": withoutReadFS})
	if err != nil {
		t.Fatal(err)
	}
	a := e.newAgent(t, "agent-1", token, followingRenders(e, cluster.NewNomad(e.AgentClient(t, token, nil))))
	defer agenttest.Run(t, a)()
	e.Sim.RerenderTemplates("default", "locked", "local/config.txt", 0)
	m := a.metrics.changeMetrics()
	simtest.WaitFor(t, ctx, "a refused read of the files", func() bool {
		return testutil.ToFloat64(m.renderReads.WithLabelValues("denied")) >= 1 &&
			testutil.ToFloat64(m.warnings.WithLabelValues("read_fs_denied")) >= 1
	})
	time.Sleep(3 * time.Second) // past the debounce
	if recs := jobRollouts(t, ctx, e, "locked"); len(recs) != 0 {
		t.Errorf("%d restarts filed without reading the files", len(recs))
	}
}
