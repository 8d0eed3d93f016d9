package consul

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// fakeClock is a clock the test moves, with the timers armed on it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (k *fakeClock) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

func (k *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := &fakeTimer{at: k.now.Add(d), f: f}
	k.timers = append(k.timers, t)
	return func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// advance moves the clock by d and runs the timers that fall due, in order.
func (k *fakeClock) advance(d time.Duration) {
	k.mu.Lock()
	k.now = k.now.Add(d)
	k.mu.Unlock()
	for {
		k.mu.Lock()
		var next *fakeTimer
		for _, t := range k.timers {
			if !t.stopped && !t.at.After(k.now) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next != nil {
			next.stopped = true
		}
		k.mu.Unlock()
		if next == nil {
			return
		}
		next.f()
	}
}

// pending is the number of timers armed and not yet run or stopped.
func (k *fakeClock) pending() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, t := range k.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

type drainEnv struct {
	c     *Catalog
	cl    *api.Client
	clock *fakeClock
	url   string
}

// newDrainEnv is a catalog on a fake clock with two instances of web on node-1 (passing)
// and one of db on node-2, served over HTTP.
func newDrainEnv(t *testing.T) *drainEnv {
	t.Helper()
	clock := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := New("node-1", Config{Now: clock.Now, AfterFunc: clock.AfterFunc})
	t.Cleanup(c.Close)
	cl, url := serveHTTP(t, c)
	for _, id := range []string{"web-a", "web-b"} {
		c.Register(Instance{ID: id, Service: "web", Address: "10.0.0.1", Port: 8080,
			Checks: []Check{{ID: "alive-" + id, Name: "alive", Status: StatusPassing, Output: "HTTP GET: 200 OK"}}})
	}
	c.Register(Instance{ID: "db-a", Service: "db", Node: "node-2", Checks: []Check{{ID: "alive-db-a", Status: StatusPassing}}})
	return &drainEnv{c: c, cl: cl, clock: clock, url: url}
}

// drain registers the drain check on an instance as nomad-restart does.
func (e *drainEnv) drain(t *testing.T, serviceID, status, output string) {
	t.Helper()
	entries, _, err := e.cl.Catalog().Service("web", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		if entry.ServiceID != serviceID {
			continue
		}
		_, err := e.cl.Catalog().Register(&api.CatalogRegistration{
			Node: entry.Node, Address: entry.Address, Datacenter: entry.Datacenter, SkipNodeUpdate: true,
			Check: &api.AgentCheck{Node: entry.Node, CheckID: "nomad-restart-drain:" + entry.ServiceID,
				Name: "nomad-restart drain", Status: status, Notes: "restarting", Output: output,
				ServiceID: entry.ServiceID},
		}, nil)
		if err != nil {
			t.Fatalf("register the drain check of %s: %v", serviceID, err)
		}
		return
	}
	t.Fatalf("no instance %s in the catalog", serviceID)
}

func (e *drainEnv) undrain(t *testing.T, serviceID string) {
	t.Helper()
	_, err := e.cl.Catalog().Deregister(&api.CatalogDeregistration{Node: "node-1",
		CheckID: "nomad-restart-drain:" + serviceID, Datacenter: "dc1"}, nil)
	if err != nil {
		t.Fatalf("deregister the drain check of %s: %v", serviceID, err)
	}
}

// passing lists the IDs of web's instances that ?passing answers, and the query's index.
func (e *drainEnv) passing(t *testing.T) ([]string, uint64) {
	t.Helper()
	entries, qm, err := e.cl.Health().Service("web", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, en := range entries {
		ids = append(ids, en.Service.ID)
	}
	return ids, qm.LastIndex
}

func (e *drainEnv) drainCheck(t *testing.T, serviceID string) *api.HealthCheck {
	t.Helper()
	checks, _, err := e.cl.Health().Checks("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range checks {
		if ch.CheckID == "nomad-restart-drain:"+serviceID {
			return ch
		}
	}
	return nil
}

func TestDrainCheckTakesInstanceOutOfPassing(t *testing.T) {
	e := newDrainEnv(t)
	ids, before := e.passing(t)
	if strings.Join(ids, ",") != "web-a,web-b" {
		t.Fatalf("passing before the drain: %v", ids)
	}

	// A blocking query on the service answers the drain.
	woke := make(chan []string, 1)
	go func() {
		entries, _, err := e.cl.Health().Service("web", "", true, &api.QueryOptions{WaitIndex: before, WaitTime: time.Minute})
		if err != nil {
			woke <- []string{err.Error()}
			return
		}
		var ids []string
		for _, en := range entries {
			ids = append(ids, en.Service.ID)
		}
		woke <- ids
	}()
	e.drain(t, "web-a", "critical", "draining")
	select {
	case got := <-woke:
		if strings.Join(got, ",") != "web-b" {
			t.Fatalf("blocking ?passing after the drain: %v, want web-b", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking query did not answer the drain")
	}
	ch := e.drainCheck(t, "web-a")
	if ch == nil || ch.Status != "critical" || ch.Name != "nomad-restart drain" || ch.Notes != "restarting" ||
		ch.Output != "draining" || ch.ServiceName != "web" || ch.Node != "node-1" || ch.Type != "" ||
		ch.CreateIndex != ch.ModifyIndex {
		t.Fatalf("the drain check as /v1/health/checks lists it: %+v", ch)
	}
	crit, _, err := e.cl.Health().State("critical", nil)
	if err != nil || len(crit) != 1 || crit[0].CheckID != "nomad-restart-drain:web-a" {
		t.Fatalf("critical checks: %+v %v", crit, err)
	}
	// The catalog still lists the instance; the entry of /v1/health/service carries the
	// node's check, then the instance's, by ID.
	all, _, err := e.cl.Health().Service("web", "", false, nil)
	if err != nil || len(all) != 2 {
		t.Fatalf("all instances: %d %v", len(all), err)
	}
	var got []string
	for _, c := range all[0].Checks {
		got = append(got, c.CheckID)
	}
	if strings.Join(got, ",") != "serfHealth,alive-web-a,nomad-restart-drain:web-a" {
		t.Fatalf("checks of web-a's entry: %v", got)
	}

	// Registering it again updates it in place; the same registration again changes nothing.
	e.drain(t, "web-a", "critical", "still draining")
	again := e.drainCheck(t, "web-a")
	if again.Output != "still draining" || again.CreateIndex != ch.CreateIndex || again.ModifyIndex <= ch.ModifyIndex {
		t.Fatalf("after registering it again: %+v (first %+v)", again, ch)
	}
	_, idx := e.passing(t)
	e.drain(t, "web-a", "critical", "still draining")
	if _, idx2 := e.passing(t); idx2 != idx {
		t.Fatalf("the same registration moved the service's index %d -> %d", idx, idx2)
	}
	if same := e.drainCheck(t, "web-a"); same.ModifyIndex != again.ModifyIndex {
		t.Fatalf("the same registration moved the check's ModifyIndex %d -> %d", again.ModifyIndex, same.ModifyIndex)
	}

	e.undrain(t, "web-a")
	if ids, after := e.passing(t); strings.Join(ids, ",") != "web-a,web-b" || after <= idx {
		t.Fatalf("passing after the check's deregistration: %v at %d (before %d)", ids, after, idx)
	}
	// Deregistering a check that is not there succeeds, and changes nothing.
	_, idx = e.passing(t)
	e.undrain(t, "web-a")
	if _, idx2 := e.passing(t); idx2 != idx {
		t.Fatalf("deregistering a missing check moved the index %d -> %d", idx, idx2)
	}
}

// rawPut sends a PUT and returns the status and body.
func rawPut(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestCatalogWriteErrors(t *testing.T) {
	e := newDrainEnv(t)
	tests := []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"register without a node", "register", `{"Address":"10.0.0.1"}`, 500, "Must provide node"},
		{"register without an address", "register", `{"Node":"node-1"}`, 500, "Must provide address if SkipNodeUpdate is not set"},
		{"bad node ID", "register", `{"Node":"node-1","ID":"x","SkipNodeUpdate":true}`, 500, "Bad node ID: uuid string is wrong length"},
		{"node ID without dashes", "register", `{"Node":"node-1","ID":"0123456789abcdef0123456789abcdef0123","SkipNodeUpdate":true}`,
			500, "Bad node ID: uuid is improperly formatted"},
		{"node ID not hex", "register", `{"Node":"node-1","ID":"01234567-89ab-cdef-0123-456789abcdeg","SkipNodeUpdate":true}`,
			500, "Bad node ID: encoding/hex: invalid byte: U+0067 'g'"},
		{"check bound to a service ID of another case", "register",
			`{"Node":"node-1","SkipNodeUpdate":true,"Check":{"CheckID":"c","ServiceID":"WEB-A"}}`,
			500, "Unknown service ID 'WEB-A' for check ID 'c'"},
		{"a peer name", "register", `{"Node":"node-1","SkipNodeUpdate":true,"PeerName":"p"}`, 500, "cannot register requests with PeerName in them"},
		{"check bound to a missing service", "register",
			`{"Node":"node-1","SkipNodeUpdate":true,"Check":{"CheckID":"c","ServiceID":"nosuch","Status":"critical"}}`,
			500, "Unknown service ID 'nosuch' for check ID 'c'"},
		{"check bound to a service of another node", "register",
			`{"Node":"node-1","SkipNodeUpdate":true,"Check":{"CheckID":"c","ServiceID":"db-a"}}`,
			500, "Unknown service ID 'db-a' for check ID 'c'"},
		{"check bound to a service of an unknown node", "register",
			`{"Node":"node-9","SkipNodeUpdate":true,"Check":{"Name":"n","ServiceID":"web-a"}}`,
			500, "Unknown service ID 'web-a' for check ID 'n'"},
		{"check of another node", "register",
			`{"Node":"node-1","SkipNodeUpdate":true,"Check":{"Node":"node-2","CheckID":"c"}}`,
			500, "Node 'node-2' for check 'c' doesn't match register request node 'node-1'"},
		{"service ID without a name", "register",
			`{"Node":"node-1","SkipNodeUpdate":true,"Service":{"ID":"x"}}`,
			500, "Must provide service name (Service.Service) when service ID is provided"},
		{"wildcard service address", "register",
			`{"Node":"node-1","SkipNodeUpdate":true,"Service":{"Service":"x","Address":"0.0.0.0"}}`,
			500, "Invalid service address"},
		{"another datacenter", "register", `{"Node":"node-1","Datacenter":"dc9","SkipNodeUpdate":true}`, 500, "No path to datacenter"},
		{"check without an ID", "register", `{"Node":"node-1","SkipNodeUpdate":true,"Check":{"Status":"critical"}}`, 500,
			`failed inserting check on node "node-1": failed health check lookup: index error: object is missing a value for this index`},
		{"register with a bad body", "register", `{`, 400, "Request decode failed: unexpected EOF"},
		{"register without a body", "register", ``, 400, "Request decode failed: EOF"},
		{"register a list", "register", `[]`, 400,
			"Request decode failed: json: cannot unmarshal array into Go value of type structs.RegisterRequest"},
		{"register a number as the node", "register", `{"Node":5}`, 400,
			"Request decode failed: json: cannot unmarshal number into Go struct field RegisterRequest.Node of type string"},
		{"deregister without a node", "deregister", `{"CheckID":"c"}`, 500, "Must provide node"},
		{"deregister with a bad body", "deregister", `[]`, 400,
			"Request decode failed: json: cannot unmarshal array into Go value of type struct { Address string; *structs.Alias }"},
		{"deregister a number as the node", "deregister", `{"Node":5}`, 400,
			"Request decode failed: json: cannot unmarshal number into Go struct field .Alias.Node of type string"},
		{"deregister in another datacenter", "deregister", `{"Node":"node-1","Datacenter":"dc9","CheckID":"x"}`, 500, "No path to datacenter"},
		{"deregister a missing check", "deregister", `{"Node":"node-1","CheckID":"nosuch"}`, 200, "true"},
		{"deregister a missing service", "deregister", `{"Node":"node-1","ServiceID":"nosuch"}`, 200, "true"},
		{"deregister a missing node", "deregister", `{"Node":"node-9"}`, 200, "true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rawPut(t, e.url+"/v1/catalog/"+tc.path, tc.body)
			if code != tc.code || body != tc.want {
				t.Fatalf("%d %q, want %d %q", code, body, tc.code, tc.want)
			}
		})
	}
	resp, err := http.Get(e.url + "/v1/catalog/register")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "OPTIONS,PUT" {
		t.Fatalf("GET /v1/catalog/register: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// Nothing was written.
	if ids, _ := e.passing(t); strings.Join(ids, ",") != "web-a,web-b" {
		t.Fatalf("passing after the refused writes: %v", ids)
	}
}

// TestDeregisteredInstanceTakesItsChecks: the instance's deregistration by Nomad deletes
// the checks bound to it, the drain check among them, so that a registration anew (a
// restart) comes back without it; a registration anew without a deregistration (through
// the agent, the same ID) keeps it.
func TestDeregisteredInstanceTakesItsChecks(t *testing.T) {
	e := newDrainEnv(t)
	inst := Instance{ID: "web-a", Service: "web", Address: "10.0.0.1", Port: 8080,
		Checks: []Check{{ID: "alive-web-a", Name: "alive", Status: StatusPassing}}}
	e.drain(t, "web-a", "critical", "")
	retagged := inst
	retagged.Tags = []string{"v2"}
	e.c.Register(retagged)
	// Kept, with the service's tags as they were when it was registered, as Consul copies
	// them into the check.
	if ch := e.drainCheck(t, "web-a"); ch == nil || len(ch.ServiceTags) != 0 {
		t.Fatalf("the drain check after a registration anew through the agent: %+v", ch)
	}
	e.c.Deregister("web-a")
	if ch := e.drainCheck(t, "web-a"); ch != nil {
		t.Fatalf("the drain check outlived its instance: %+v", ch)
	}
	crit, _, _ := e.cl.Health().State("critical", nil)
	if len(crit) != 0 {
		t.Fatalf("critical checks after the deregistration: %+v", crit)
	}
	e.c.Register(inst)
	if ids, _ := e.passing(t); strings.Join(ids, ",") != "web-a,web-b" {
		t.Fatalf("passing after the registration anew: %v", ids)
	}
	// Deregistering the drain check of the instance gone is Consul's success.
	e.undrain(t, "web-a")
}

func TestAntiEntropyRemovesForeignChecks(t *testing.T) {
	e := newDrainEnv(t)
	e.drain(t, "web-a", "critical", "")
	e.clock.advance(30 * time.Second)
	e.drain(t, "web-b", "critical", "")
	e.clock.advance(AntiEntropyDelay - 30*time.Second - time.Millisecond)
	if ids, _ := e.passing(t); len(ids) != 0 {
		t.Fatalf("passing just before the anti-entropy: %v", ids)
	}
	_, before := e.passing(t)
	e.clock.advance(time.Millisecond)
	// web-a's check went a minute after its registration; web-b's is 30 s younger.
	ids, after := e.passing(t)
	if strings.Join(ids, ",") != "web-a" || after <= before {
		t.Fatalf("passing a minute after the first drain: %v at %d (before %d)", ids, after, before)
	}
	e.clock.advance(30 * time.Second)
	if ids, _ := e.passing(t); strings.Join(ids, ",") != "web-a,web-b" {
		t.Fatalf("passing a minute after the second drain: %v", ids)
	}
	if n := e.clock.pending(); n != 0 {
		t.Fatalf("%d anti-entropy timers still armed with nothing to correct", n)
	}
}

// TestAntiEntropyRestoresTheAgentsState: what the agent registered comes back a minute
// after the catalog API changed or removed it; a node without an agent keeps what the
// catalog API wrote there.
func TestAntiEntropyRestoresTheAgentsState(t *testing.T) {
	e := newDrainEnv(t)
	cat := e.cl.Catalog()
	// Overwrite web-a's own check, delete web-b from the catalog, and register an outside
	// node with a service and a failing node-level check.
	if _, err := cat.Register(&api.CatalogRegistration{Node: "node-1", SkipNodeUpdate: true,
		Check: &api.AgentCheck{CheckID: "alive-web-a", Name: "alive", Status: "critical", ServiceID: "web-a"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Deregister(&api.CatalogDeregistration{Node: "node-1", ServiceID: "web-b"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Register(&api.CatalogRegistration{Node: "outside", Address: "192.0.2.1",
		Service: &api.AgentService{ID: "web-x", Service: "web", Port: 80},
		Checks:  api.HealthChecks{{CheckID: "maint", Name: "maintenance", Status: "critical"}}}, nil); err != nil {
		t.Fatal(err)
	}
	all, _, err := e.cl.Health().Service("web", "", false, nil)
	if err != nil || len(all) != 2 || all[0].Service.ID != "web-a" || all[1].Service.ID != "web-x" {
		t.Fatalf("instances after the catalog writes: %+v %v", all, err)
	}
	x := all[1]
	if x.Node.Address != "192.0.2.1" || len(x.Checks) != 1 || x.Checks[0].CheckID != "maint" || x.Checks[0].ServiceName != "" {
		t.Fatalf("the outside node's entry: %+v %+v", x.Node, x.Checks)
	}
	if ids, _ := e.passing(t); len(ids) != 0 {
		t.Fatalf("passing after the catalog writes: %v", ids)
	}
	e.clock.advance(AntiEntropyDelay)
	ids, _ := e.passing(t)
	if strings.Join(ids, ",") != "web-a,web-b" {
		t.Fatalf("passing after the anti-entropy: %v", ids)
	}
	all, _, _ = e.cl.Health().Service("web", "", false, nil)
	if len(all) != 3 || all[2].Service.ID != "web-x" {
		t.Fatalf("the outside node's instance after the anti-entropy: %+v", all)
	}
	// The agent's node comes back too.
	if _, err := cat.Deregister(&api.CatalogDeregistration{Node: "node-1"}, nil); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.passing(t); len(ids) != 0 {
		t.Fatalf("passing after the node's deregistration: %v", ids)
	}
	e.clock.advance(AntiEntropyDelay)
	if ids, _ := e.passing(t); strings.Join(ids, ",") != "web-a,web-b" {
		t.Fatalf("passing after the node's anti-entropy: %v", ids)
	}
	// Deregistering the outside node takes its service and checks.
	if _, err := cat.Deregister(&api.CatalogDeregistration{Node: "outside"}, nil); err != nil {
		t.Fatal(err)
	}
	if all, _, _ := e.cl.Health().Service("web", "", false, nil); len(all) != 2 {
		t.Fatalf("instances after the outside node's deregistration: %d", len(all))
	}
	state, _, _ := e.cl.Health().State("any", nil)
	for _, ch := range state {
		if ch.Node == "outside" {
			t.Fatalf("a check of the deregistered node: %+v", ch)
		}
	}
}

// TestNodeCheckFailsItsNodesInstances: a node-level check that is not passing takes every
// instance on the node out of ?passing.
func TestNodeCheckFailsItsNodesInstances(t *testing.T) {
	e := newDrainEnv(t)
	reg := &api.CatalogRegistration{Node: "node-1", SkipNodeUpdate: true,
		Check: &api.AgentCheck{Name: "maintenance", Status: "warning"}}
	if _, err := e.cl.Catalog().Register(reg, nil); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.passing(t); len(ids) != 0 {
		t.Fatalf("passing with a warning on the node: %v", ids)
	}
	warn, _, _ := e.cl.Health().State("warning", nil)
	if len(warn) != 1 || warn[0].CheckID != "maintenance" || warn[0].ServiceID != "" {
		t.Fatalf("warning checks: %+v", warn)
	}
	// Not a check of the service's.
	if checks, _, _ := e.cl.Health().Checks("web", nil); len(checks) != 2 {
		t.Fatalf("web's checks: %+v", checks)
	}
	if _, err := e.cl.Catalog().Deregister(&api.CatalogDeregistration{Node: "NODE-1", CheckID: "Maintenance"}, nil); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.passing(t); len(ids) != 2 {
		t.Fatalf("passing after the node check's deregistration (names ignore case): %v", ids)
	}
}
