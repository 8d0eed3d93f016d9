package health_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/health"
)

// TestDrainTakesTheAllocationOutOfPassing drains an allocation's Consul service on
// nomadsim's Consul over real HTTP: its instance leaves /v1/health/service/<name>?passing
// (what a load balancer reads) with the drain's check on it, comes back once undrained,
// and undraining again (the check gone already) is no error.
func TestDrainTakesTheAllocationOutOfPassing(t *testing.T) {
	sim, n := startSim(t)
	_, a := deploy(t, sim, n, mixedJob("drained", "pass", "pass"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := consulapi.NewClient(&consulapi.Config{Address: sim.ConsulAddr()})
	if err != nil {
		t.Fatal(err)
	}
	passing := func() []*consulapi.ServiceEntry {
		t.Helper()
		entries, _, err := cc.Health().Service("drained-api", "", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for ctx.Err() == nil && !ok() {
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
	waitFor("the instance to pass", func() bool { return len(passing()) == 1 })

	consul, err := health.NewConsul(health.ConsulConfig{Address: sim.ConsulAddr()}, sim.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := consul.Drain(ctx, a.ID, []string{"drained-api", "drained-missing"}, "restarting it")
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if len(d.Instances) != 1 || !strings.HasPrefix(d.Instances[0].ServiceID, health.ServicePrefix(a.ID)) {
		t.Fatalf("drained %+v, want the allocation's one instance of drained-api", d.Instances)
	}
	if got := passing(); len(got) != 0 {
		t.Fatalf("passing instances while drained: %d, want 0", len(got))
	}
	checks, _, err := cc.Health().Checks("drained-api", nil)
	if err != nil {
		t.Fatal(err)
	}
	var found *consulapi.HealthCheck
	for _, c := range checks {
		if c.CheckID == health.DrainCheckPrefix+d.Instances[0].ServiceID {
			found = c
		}
	}
	if found == nil || found.Status != consulapi.HealthCritical || found.Output != "restarting it" || found.ServiceID != d.Instances[0].ServiceID {
		t.Fatalf("the drain's check: %+v, want it critical on the instance with its reason", found)
	}

	if err := consul.Undrain(ctx, d); err != nil {
		t.Fatalf("undrain: %v", err)
	}
	if got := passing(); len(got) != 1 {
		t.Fatalf("passing instances after the undrain: %d, want 1", len(got))
	}
	if err := consul.Undrain(ctx, d); err != nil {
		t.Fatalf("undrain of a check already gone: %v", err)
	}
}

// TestDrainDeniedSaysWhatToGrant: Consul's ACLs refuse the catalog write; the error wraps
// ErrDrainDenied and names the rules to grant, and the way out.
func TestDrainDeniedSaysWhatToGrant(t *testing.T) {
	const allocID = "5d8c2f55-0000-4000-8000-000000000001"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/catalog/service/web":
			w.Header().Set("X-Consul-Index", "7")
			_, _ = w.Write([]byte(`[{"Node":"n1","Address":"127.0.0.1","Datacenter":"dc1","ServiceID":"_nomad-task-` + allocID + `-group-web-web-http","ServiceName":"web"}]`))
		case r.Method == http.MethodPut && r.URL.Path == "/v1/catalog/register":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("Permission denied: token with AccessorID 'x' lacks permission 'service:write' on \"web\""))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	consul, err := health.NewConsul(health.ConsulConfig{Address: srv.URL}, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = consul.Drain(context.Background(), allocID, []string{"web"}, "restarting")
	if !errors.Is(err, health.ErrDrainDenied) {
		t.Fatalf("error %v, want ErrDrainDenied", err)
	}
	for _, want := range []string{"service:write", "-drain 0", "403"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
