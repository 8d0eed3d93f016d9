package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// FuzzFilters sends any -filter and -jobs expression to Nomad (nomadsim, over real HTTP
// through the api client), as a restart and a fleet do: no panic or hang; -filter matches
// only allocations of the job restarted, whatever the expression closes or adds (the job's
// own clause cannot be escaped); -jobs selects only jobs that exist; an expression Nomad
// refuses is an error at once (not retried as a passing failure), for -jobs a *FilterError
// naming the expression.
func FuzzFilters(f *testing.F) {
	for _, expr := range []string{
		`TaskGroup == "web"`, `ClientStatus == "running"`, `Meta.team == "core"`, `Meta.team === "core"`, `true`,
		`JobSummary.Summary.web.Running == 1`, `Name matches "^api-"`, `TaskGroup == "web") or (JobID != ""`,
		`x) or (true`, `ID != "") or ("a" == "a"`, `)`, `(`, `"`, ``, `ClientStatus == "running" or JobID == "api"`,
	} {
		f.Add(expr)
	}
	sim := simtest.Start(f, nomadsim.Options{TimeScale: timeScale, Seed: 7})
	simtest.RegisterRunning(f, sim, serviceJob("default", "web", 2), serviceJob("default", "api", 2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := cluster.NewNomadWithOptions(simtest.Client(f, sim), cluster.Options{
		// A refused expression is never retried; anything retried would be a transient
		// failure the property below reports, so a short bound is enough.
		Retry: cluster.RetryPolicy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: time.Second},
	})
	web, err := n.MatchingAllocations(ctx, "default", "web", `ID != ""`)
	if err != nil || len(web) != 2 {
		f.Fatalf("web's allocations: %v, %v", web, err)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		fuzztest.Bound(t, "the filters", func() {
			ctx, cancel := context.WithTimeout(context.Background(), fuzztest.Limit)
			defer cancel()
			m, err := n.MatchingAllocations(ctx, "default", "web", expr)
			if err != nil {
				if cluster.IsTransient(err) {
					t.Errorf("-filter %q: %v, a failure that passes: Nomad refuses an expression for good", expr, err)
				}
			}
			for id := range m {
				if !web[id] {
					t.Errorf("-filter %q matched %s, not an allocation of job web", expr, id)
				}
			}
			jobs, err := n.SelectJobs(ctx, "default", expr)
			if err != nil {
				var fe *cluster.FilterError
				if !errors.As(err, &fe) || fe.Expr != expr {
					t.Errorf("-jobs %q: %v (%T), want a *FilterError naming the expression", expr, err, err)
				}
				if strings.ContainsAny(err.Error(), "\r\n") {
					t.Errorf("-jobs %q: the error is not one line: %q", expr, err)
				}
				return
			}
			for _, j := range jobs {
				if j.Namespace != "default" || (j.ID != "web" && j.ID != "api") {
					t.Errorf("-jobs %q selected %s/%s", expr, j.Namespace, j.ID)
				}
			}
		})
	})
}
