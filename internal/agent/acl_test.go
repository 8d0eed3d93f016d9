package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// An agent whose token has no rights on the restarts' namespace sees nothing, drives
// nothing and shows nothing; an agent with the documented policy then finishes the restart.
func TestACLTokenWithoutRightsGetsNothingDone(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.register(t, "default", "web", 3, nil)
	rec := e.detached(t, "default", "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	ctx := testContext(t)

	weak, err := e.sim.CreateToken("weak", map[string]string{
		"elsewhere": `namespace "elsewhere" { policy = "write" variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } } }`,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := e.newAgent(t, "weak-agent", weak, nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	stop := start(t, a)
	simtest.WaitFor(t, ctx, "a listing by the weak agent", func() bool {
		return testutil.ToFloat64(a.metrics.discoveryPass) >= 1 && a.Ready()
	})
	page := get(t, srv.URL+"/", http.StatusOK)
	if strings.Contains(page, rec.ID) || !strings.Contains(page, "No restarts.") {
		t.Errorf("the weak agent's page shows restarts it may not read:\n%s", page)
	}
	get(t, srv.URL+"/restart/"+rec.ID, http.StatusNotFound)
	stop()
	if got := testutil.ToFloat64(a.metrics.adoptions); got != 0 {
		t.Errorf("the weak agent adopted %v restarts", got)
	}
	cur, err := e.store.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status != restart.StatusPending || cur.ModifyIndex != rec.ModifyIndex {
		t.Errorf("the weak agent changed the restart: status %s, index %d -> %d", cur.Status, rec.ModifyIndex, cur.ModifyIndex)
	}
	counts, err := simtest.CountRestarts(ctx, e.client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(counts.InPlace) != 0 {
		t.Errorf("allocations restarted without the rights: %v", counts.InPlace)
	}

	// The agent policy of docs/acl.md (deploy/agent-policy.hcl) is enough.
	agentToken := e.shippedToken(t, "agent")
	good := e.newAgent(t, "agent", agentToken, nil)
	start(t, good)
	final := e.waitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("with the agent policy the restart ended %s (%s)", final.Status, final.Reason)
	}
	e.checkOnce(t, final)
}

// policy reads one of the ACL policies the project ships in deploy/.
func policy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The operator policy of deploy/operator-policy.hcl is enough to file a restart for the
// agent (plan and create, as `run -detach` does), and the agent policy to drive it.
func TestACLShippedPoliciesSuffice(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	e.register(t, "default", "web", 2, nil)
	opClient := e.shippedClient(t, "operator")
	opStore := store.NewNomad(opClient, store.NomadOptions{})
	operator := engine.New(engine.Config{Cluster: cluster.NewNomad(opClient), Store: opStore, Holder: "operator"})
	ctx := testContext(t)
	p, err := operator.Plan(ctx, engine.Request{Namespace: "default", Job: "web"})
	if err != nil {
		t.Fatalf("planning with the operator policy: %v", err)
	}
	if err := operator.Create(ctx, p.Record); err != nil {
		t.Fatalf("filing the restart with the operator policy: %v", err)
	}
	agentToken := e.shippedToken(t, "agent")
	a := e.newAgent(t, "agent", agentToken, nil)
	start(t, a)
	final := e.waitEnd(t, p.Record)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", final.Status, final.Reason)
	}
	e.checkOnce(t, final)
	if got := testutil.ToFloat64(a.metrics.apiErrors.WithLabelValues("403")); got != 0 {
		t.Errorf("the agent policy let %v requests be denied", got)
	}
}
