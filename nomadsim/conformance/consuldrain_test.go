package conformance

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// drainTarget is a Consul with one instance of a service registered through the node's
// agent, as Nomad registers it: in the sim by a job's Consul service, on a real agent
// through /v1/agent/service/register.
type drainTarget struct {
	*consulTarget
	service string
	now     func() time.Time // the target's clock: simulated in the sim
}

// forEachDrainConsul runs fn against the sim's Consul (a cluster at the conformance time
// scale running a job with a Consul service) and against the real agent named by
// CONSUL_CONFORMANCE_ADDR when there is one.
func forEachDrainConsul(t *testing.T, fn func(t *testing.T, tg *drainTarget)) {
	t.Helper()
	t.Run("sim", func(t *testing.T) {
		t.Parallel()
		c := simtest.Start(t, nomadsim.Options{TimeScale: simTimeScale, Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
		tg := &drainTarget{consulTarget: newConsulTarget(t, "sim", c.ConsulAddr(), "conf"), service: "conf-drain-svc", now: c.Now}
		job := serviceJob("conf-drain", 1, sleepTask("server"))
		job.TaskGroups[0].Services = []*api.Service{{Name: tg.service, Provider: "consul"}}
		if _, err := c.RegisterJob(job); err != nil {
			t.Fatal(err)
		}
		fn(t, tg)
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		addr := os.Getenv(envConsulAddr)
		if addr == "" {
			t.Skip(envConsulAddr + " not set: no real Consul agent to check this case against")
		}
		ct := newConsulTarget(t, "real", addr, "conf-"+randomHex(t, 4))
		tg := &drainTarget{consulTarget: ct, service: ct.prefix + "-drain-svc", now: time.Now}
		id := tg.service + "-1"
		if err := ct.api.Agent().ServiceRegister(&consulapi.AgentServiceRegistration{ID: id, Name: tg.service, Port: 8080}); err != nil {
			t.Fatalf("register %s through the agent: %v", id, err)
		}
		t.Cleanup(func() { _ = ct.api.Agent().ServiceDeregister(id) })
		fn(t, tg)
	})
}

// instance waits for the service's one instance in the catalog and returns it.
func (tg *drainTarget) instance(t *testing.T) *consulapi.CatalogService {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		entries, _, err := tg.api.Catalog().Service(tg.service, "", (&consulapi.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatalf("catalog service %s: %v", tg.service, err)
		}
		if len(entries) == 1 {
			return entries[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// passing reports whether ?passing lists the instance.
// waitPassing waits until the instance passes its checks, as the health API says.
func (tg *drainTarget) waitPassing(t *testing.T, serviceID string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !tg.passing(t, serviceID); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("instance %s never passing", serviceID)
		}
	}
}

func (tg *drainTarget) passing(t *testing.T, serviceID string) bool {
	t.Helper()
	entries, _, err := tg.api.Health().Service(tg.service, "", true, nil)
	if err != nil {
		t.Fatalf("health service %s?passing: %v", tg.service, err)
	}
	return slices.ContainsFunc(entries, func(e *consulapi.ServiceEntry) bool { return e.Service.ID == serviceID })
}

// check is the instance's check of the ID as /v1/health/checks lists it, nil if none.
func (tg *drainTarget) check(t *testing.T, checkID string) *consulapi.HealthCheck {
	t.Helper()
	checks, _, err := tg.api.Health().Checks(tg.service, nil)
	if err != nil {
		t.Fatalf("health checks %s: %v", tg.service, err)
	}
	for _, c := range checks {
		if c.CheckID == checkID {
			return c
		}
	}
	return nil
}

// registerDrain registers the drain check on the instance as nomad-restart's -drain does.
func registerDrain(entry *consulapi.CatalogService, api *consulapi.Client) error {
	_, err := api.Catalog().Register(&consulapi.CatalogRegistration{
		Node: entry.Node, Address: entry.Address, Datacenter: entry.Datacenter, SkipNodeUpdate: true,
		Check: &consulapi.AgentCheck{Node: entry.Node, CheckID: "nomad-restart-drain:" + entry.ServiceID,
			Name: "nomad-restart drain", Status: "critical", Notes: "drained for a restart",
			Output: "restarting allocation", ServiceID: entry.ServiceID},
	}, nil)
	return err
}

// TestConsulDrainCheck: a critical check registered through the catalog API, bound to an
// instance, takes it out of ?passing at once, and its deregistration brings it back.
// Deregistering it again, once gone, is a success (deleteCheckTxn ignores a missing check),
// and a check bound to a service ID the node does not have is refused with a 500 and
// vetRegisterWithACL's text, which runs without ACLs too (measured on Consul 1.20.6).
func TestConsulDrainCheck(t *testing.T) {
	forEachDrainConsul(t, func(t *testing.T, tg *drainTarget) {
		entry := tg.instance(t)
		checkID := "nomad-restart-drain:" + entry.ServiceID
		tg.waitPassing(t, entry.ServiceID)
		if err := registerDrain(entry, tg.api); err != nil {
			t.Fatalf("register the drain check: %v", err)
		}
		if tg.passing(t, entry.ServiceID) {
			t.Fatal("?passing still lists the drained instance right after the drain check's registration")
		}
		ch := tg.check(t, checkID)
		if ch == nil || ch.Status != "critical" || ch.Name != "nomad-restart drain" || ch.Notes != "drained for a restart" ||
			ch.Output != "restarting allocation" || ch.ServiceName != tg.service || ch.ServiceID != entry.ServiceID ||
			ch.Node != entry.Node || ch.Type != "" || ch.CreateIndex != ch.ModifyIndex {
			t.Fatalf("the drain check as listed: %+v", ch)
		}
		// Registering it again updates it in place.
		created := ch.CreateIndex
		if _, err := tg.api.Catalog().Register(&consulapi.CatalogRegistration{Node: entry.Node, SkipNodeUpdate: true,
			Check: &consulapi.AgentCheck{CheckID: checkID, Name: "nomad-restart drain", Status: "critical",
				Output: "still restarting", ServiceID: entry.ServiceID}}, nil); err != nil {
			t.Fatalf("register the drain check again: %v", err)
		}
		if ch := tg.check(t, checkID); ch == nil || ch.Output != "still restarting" || ch.Notes != "" ||
			ch.CreateIndex != created || ch.ModifyIndex <= created {
			t.Fatalf("the drain check registered again: %+v (created at %d)", ch, created)
		}

		dereg := &consulapi.CatalogDeregistration{Node: entry.Node, CheckID: checkID, Datacenter: entry.Datacenter}
		if _, err := tg.api.Catalog().Deregister(dereg, nil); err != nil {
			t.Fatalf("deregister the drain check: %v", err)
		}
		if !tg.passing(t, entry.ServiceID) {
			t.Fatal("?passing does not list the instance right after the drain check's deregistration")
		}
		if ch := tg.check(t, checkID); ch != nil {
			t.Fatalf("the drain check after its deregistration: %+v", ch)
		}
		// A missing check: the same success, raw.
		r := tg.do(t, http.MethodPut, "/v1/catalog/deregister",
			`{"Node":"`+entry.Node+`","CheckID":"`+checkID+`","Datacenter":"dc1"}`)
		if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "true" {
			t.Fatalf("deregister a missing check: %d %q, want 200 true", r.status, r.body)
		}

		// A check bound to a service the node does not have.
		body := `{"Node":"` + entry.Node + `","SkipNodeUpdate":true,"Check":{"CheckID":"` + tg.prefix +
			`-orphan","Name":"orphan","Status":"critical","ServiceID":"` + tg.prefix + `-nosuch"}}`
		r = tg.do(t, http.MethodPut, "/v1/catalog/register", body)
		want := "Unknown service ID '" + tg.prefix + "-nosuch' for check ID '" + tg.prefix + "-orphan'"
		if r.status != http.StatusInternalServerError || string(r.body) != want {
			t.Fatalf("a check bound to a missing service: %d %q, want 500 %q", r.status, r.body, want)
		}
		err := registerDrain(&consulapi.CatalogService{Node: entry.Node, ServiceID: tg.prefix + "-nosuch"}, tg.api)
		if err == nil || !strings.Contains(err.Error(), "Unexpected response code: 500 (Unknown service ID '"+tg.prefix+"-nosuch'") {
			t.Fatalf("consul/api's error for a check bound to a missing service: %v", err)
		}
		if tg.passing(t, entry.ServiceID) != true {
			t.Fatal("the refused registration changed the instance's health")
		}
	})
}

// TestConsulDrainCheckAntiEntropy: the node's agent removes a check that was registered
// through the catalog API on its node at its next anti-entropy full sync, and the instance
// passes again. A real agent's full sync runs every minute plus a random stagger of up to a
// minute after the previous one, whenever the check was registered, so the check goes
// anywhere from at once to about two minutes after (measured on a Consul 1.20.6 dev agent:
// full syncs 109, 116 and 86 s apart; drain checks gone 4, 79, 95 and 105 s after their
// registration); the sim removes it a minute of its clock after.
func TestConsulDrainCheckAntiEntropy(t *testing.T) {
	forEachDrainConsul(t, func(t *testing.T, tg *drainTarget) {
		entry := tg.instance(t)
		checkID := "nomad-restart-drain:" + entry.ServiceID
		tg.waitPassing(t, entry.ServiceID)
		registered := tg.now()
		if err := registerDrain(entry, tg.api); err != nil {
			t.Fatalf("register the drain check: %v", err)
		}
		realStart := time.Now()
		for tg.check(t, checkID) != nil {
			if time.Since(realStart) > 3*time.Minute {
				t.Fatal("the drain check is still there 3 minutes after its registration")
			}
			time.Sleep(100 * time.Millisecond)
		}
		gone := tg.now().Sub(registered)
		if !tg.passing(t, entry.ServiceID) {
			t.Fatal("?passing does not list the instance after the anti-entropy")
		}
		t.Logf("%s: the drain check went %v after its registration", tg.name, gone.Round(100*time.Millisecond))
		if gone > 125*time.Second {
			t.Errorf("the check went %v after its registration, want within a full sync's interval and stagger", gone)
		}
		if tg.name == "sim" && (gone < nomadsimAntiEntropy || gone > nomadsimAntiEntropy+10*time.Second) {
			t.Errorf("the sim removed the check %v after its registration, want %v", gone, nomadsimAntiEntropy)
		}
	})
}

// nomadsimAntiEntropy is the sim's delay from a catalog write to its anti-entropy.
const nomadsimAntiEntropy = time.Minute
