package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// besideAnAgent slows the writes of variables on c as a real cluster's Raft does (a round
// trip among the servers: it takes longer than a read, which gives an agent's listing time
// to see a record between two writes of its creator) and starts an eager agent on it: the
// command line's environment, a context bounding the test, and the agent's metrics.
func besideAnAgent(t *testing.T, c *nomadsim.Cluster) (cliEnv, context.Context, string) {
	t.Helper()
	c.SetFault(nomadsim.Fault{Method: http.MethodPut, Path: "/v1/var/", Latency: 20 * time.Millisecond})
	e := newCLIEnv(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return e, ctx, startEagerAgent(t, c)
}

// With an agent running, as the docs recommend, every `run` in the foreground drives the
// restart it files from its first write: the agent, which adopts the restarts no process
// drives, never takes one up, so no pipeline's `run` ends "driven by another process".
// `run -detach` still leaves its restart to the agent.
func TestRunBesideAnAgentDrivesItsOwnRestart(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	jobs := []string{"api", "web"}
	for _, j := range jobs {
		register(t, c, simpleJob(j, api.JobTypeService, 1))
	}
	e, ctx, metrics := besideAnAgent(t, c)

	// 50 runs in all: each job's one after the other (a job has one restart at a time),
	// the two jobs' side by side.
	const runsPerJob = 25
	simtest.Concurrently(t, len(jobs), func(i int) error {
		for n := range runsPerJob {
			code, out, errOut := e.run(ctx, "run", "-on-error", "fail", "-health", "none", jobs[i])
			if code != 0 {
				return fmt.Errorf("run %d of job %s exited %d:\n%s%s", n+1, jobs[i], code, out, errOut)
			}
		}
		return nil
	})
	if got := adoptions(t, metrics); got != 0 {
		t.Errorf("the agent took up %v restarts that a run drove; want none", got)
	}
	st := nomadstore.NewRestarts(nomadvars.New(adminClient(t, c), nomadvars.Options{}), nomadstore.Options{})
	for _, j := range jobs {
		recs, err := st.List(ctx, store.Filter{JobID: j})
		if err != nil {
			t.Fatal(err)
		}
		// The store keeps the newest 20 ended restarts of a job (and the one created).
		if len(recs) < store.DefaultKeep {
			t.Fatalf("%d restarts of job %s are kept, want at least %d", len(recs), j, store.DefaultKeep)
		}
		for _, rec := range recs {
			started, tookOver, detached := agenttest.DriverEvents(rec)
			if rec.Status != restart.StatusSucceeded || started != 1 || tookOver != 0 || detached != 0 {
				t.Errorf("restart %s of job %s ended %s with %d starts, %d takeovers, %d detaches; want succeeded, driven by its run alone:\n%s",
					agenttest.Short(rec.ID), j, rec.Status, started, tookOver, detached, agenttest.EventLines(rec))
			}
		}
		assertMainRestarted(t, c, j, runsPerJob)
	}

	// -detach keeps no lease: the agent takes the restart up and drives it to its end.
	id, _ := e.runDetached(t, ctx, "-on-error", "fail", "-health", "none", "web")
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return strings.HasPrefix(r.ID, id) && r.Status.Terminal() })
	if final := statusOf(t, ctx, e, id); final.Status != restart.StatusSucceeded {
		t.Fatalf("the detached restart ended %s (%s)", final.Status, final.Reason)
	}
	if got := adoptions(t, metrics); got != 1 {
		t.Errorf("the agent took up %v restarts; want the detached one", got)
	}
}

// With an agent running, `run -jobs` drives its fleet, and every child the fleet files,
// from their first writes: the agent takes up neither.
func TestRunFleetBesideAnAgentDrivesItsOwnChildren(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "svc", 4, 1)
	e, ctx, metrics := besideAnAgent(t, c)

	const fleets = 5
	for n := range fleets {
		code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^svc-"`, "-max-parallel-jobs", "4", "-on-error", "fail", "-health", "none")
		if code != 0 || !strings.Contains(out, "Fleet restarted 4 jobs successfully!") {
			t.Fatalf("fleet %d exited %d:\n%s%s", n+1, code, out, errOut)
		}
		f := fleetOf(t, ctx, e, fleetIDIn(t, out))
		for _, j := range f.Jobs {
			child := statusOf(t, ctx, e, j.RestartID)
			started, tookOver, detached := agenttest.DriverEvents(child)
			if child.Status != restart.StatusSucceeded || started != 1 || tookOver != 0 || detached != 0 {
				t.Errorf("fleet %d: the restart of job %s ended %s with %d starts, %d takeovers, %d detaches; want succeeded, driven by the fleet's process alone:\n%s",
					n+1, j.JobID, child.Status, started, tookOver, detached, agenttest.EventLines(child))
			}
		}
	}
	if got := adoptions(t, metrics); got != 0 {
		t.Errorf("the agent took up %v restarts that a fleet drove; want none", got)
	}
	for i := range 4 {
		assertMainRestarted(t, c, fmt.Sprintf("svc-%d", i), fleets)
	}
}

// startEagerAgent runs an agent on c, built as `nomad-restart agent` builds it, that lists
// the records as soon as Nomad answers rather than at most once a second: it sees every
// record the instant it is written, as an idle agent's blocking listing does. It returns
// the address of its /metrics.
func startEagerAgent(t *testing.T, c *nomadsim.Cluster) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	holder := "agent@eager"
	p := buildParts(partsConfig{client: simtest.Client(t, c), logger: logger, holder: holder,
		health: engine.HealthConfig{Clock: c.Now, TimeScale: c.TimeScale()}, sharedWatch: true})
	ag, err := agent.New(p.agentConfig(agent.Config{Namespace: "*", Holder: holder, Logger: logger,
		Metrics: agent.NewMetrics(), MinListGap: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Run(t, ag)
	srv := httptest.NewServer(ag.Handler())
	t.Cleanup(srv.Close)
	simtest.WaitFor(t, testCtx(t), "the agent's first listing (/healthz)", func() bool {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return srv.URL + "/metrics"
}

// adoptions reads the agent's count of restarts it took up from its /metrics.
func adoptions(t *testing.T, url string) float64 {
	t.Helper()
	body := agenttest.Get(t, url, http.StatusOK)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "nomad_restart_adoptions_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("reading %q: %v", sc.Text(), err)
			}
			return n
		}
	}
	t.Fatalf("no nomad_restart_adoptions_total in the agent's metrics:\n%s", body)
	return 0
}
