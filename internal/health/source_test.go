package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// fakeReader answers AllocChecks from a script of answers, one per call (the last repeats).
type fakeReader struct {
	mu      sync.Mutex
	answers []func() ([]cluster.CheckResult, error)
	calls   int
}

func (f *fakeReader) AllocChecks(_ context.Context, _ string) ([]cluster.CheckResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := min(f.calls, len(f.answers)-1)
	f.calls++
	return f.answers[i]()
}

func TestNomadChecksWatch(t *testing.T) {
	// The first answer is the shape Nomad 2.0 recorded for a group service's check.
	recorded := cluster.CheckResult{ID: "1f64", Name: `service: "web" check`, Group: "web.web[0]", Service: "web",
		Mode: "healthiness", Status: "success", StatusCode: 200, Output: "nomad: http ok", Time: time.Unix(1796008707, 0)}
	boom := errors.New("Unexpected response code: 404 (Unknown allocation)")
	r := &fakeReader{answers: []func() ([]cluster.CheckResult, error){
		func() ([]cluster.CheckResult, error) { return []cluster.CheckResult{recorded}, nil },
		func() ([]cluster.CheckResult, error) { return nil, boom },
		func() ([]cluster.CheckResult, error) { return nil, nil },
	}}
	var tick int
	clock := func() time.Time { tick++; return t0.Add(time.Duration(tick) * time.Second) }
	ctx, cancel := context.WithCancel(context.Background())
	var got []Snapshot
	err := NewNomadChecks(r, clock, nil).Watch(ctx, "420beacf-6468", time.Millisecond, 1, func(s Snapshot) {
		got = append(got, s)
		if len(got) == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("watch returned %v", err)
	}
	want := Check{Provider: ProviderNomad, ID: "1f64", Name: `service: "web" check`, Service: "web", Status: "success", Mode: "healthiness", Output: "nomad: http ok",
		Time: time.Unix(1796008707, 0)}
	if len(got[0].Checks) != 1 || got[0].Checks[0] != want || got[0].Err != nil || got[0].AllocID != "420beacf-6468" || !got[0].At.Equal(at(1)) {
		t.Fatalf("first snapshot %+v", got[0])
	}
	if !errors.Is(got[1].Err, boom) || !strings.Contains(got[1].Err.Error(), "reading Nomad checks of allocation 420beacf") {
		t.Fatalf("second snapshot %+v", got[1])
	}
	if got[2].Err != nil || len(got[2].Checks) != 0 {
		t.Fatalf("third snapshot %+v", got[2])
	}
	if err := NewNomadChecks(r, clock, nil).Watch(context.Background(), "a", 0, 1, func(Snapshot) {}); err == nil {
		t.Fatal("a zero interval was accepted")
	}
}

// fakeConsul serves /v1/health/checks/<service> as a Consul agent does, blocking on
// ?index until its state changes.
type fakeConsul struct {
	mu      sync.Mutex
	changed chan struct{}
	index   uint64
	checks  map[string][]*consulapi.HealthCheck
	indexes []string // the ?index of every request, in order
	aclHide bool     // answer as Consul does when the token may not read the service
}

func newFakeConsul() *fakeConsul {
	return &fakeConsul{changed: make(chan struct{}), index: 10, checks: map[string][]*consulapi.HealthCheck{}}
}

func (f *fakeConsul) set(service string, checks ...*consulapi.HealthCheck) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks[service] = checks
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/status/leader" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`"127.0.0.1:8300"`))
		return
	}
	svc, ok := strings.CutPrefix(r.URL.Path, "/v1/health/checks/")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	minIdx, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	f.mu.Lock()
	f.indexes = append(f.indexes, r.URL.Query().Get("index"))
	for f.index <= minIdx {
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-time.After(2 * time.Second):
		}
		f.mu.Lock()
		if f.index <= minIdx {
			break
		}
	}
	body, _ := json.Marshal(f.checks[svc])
	if f.aclHide {
		body = []byte("[]")
		w.Header().Set("X-Consul-Results-Filtered-By-ACLs", "true")
	}
	idx := f.index
	f.mu.Unlock()
	w.Header().Set("X-Consul-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("X-Consul-LastContact", "0")
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func TestConsulWatchFiltersTheAllocationAndFollowsChanges(t *testing.T) {
	fc := newFakeConsul()
	const alloc = "8f1c0c2e-0000-4000-8000-000000000001"
	mine := func(status, out string) *consulapi.HealthCheck {
		return &consulapi.HealthCheck{CheckID: "_nomad-check-1", Name: "http", Status: status, Output: out,
			ServiceID: "_nomad-task-" + alloc + "-app-web-http", ServiceName: "web"}
	}
	other := &consulapi.HealthCheck{CheckID: "_nomad-check-2", Name: "http", Status: "critical",
		ServiceID: "_nomad-task-99999999-0000-4000-8000-000000000001-app-web-http", ServiceName: "web"}
	group := &consulapi.HealthCheck{CheckID: "_nomad-check-3", Name: "db-ping", Status: "passing",
		ServiceID: "_nomad-task-" + alloc + "-group-web-db-db", ServiceName: "db"}
	fc.set("web", mine("critical", "connection refused"), other)
	fc.set("db", group)
	srv := httptest.NewServer(fc)
	defer srv.Close()

	c, err := NewConsul(ConsulConfig{Address: srv.URL, Wait: 5 * time.Second}, func() time.Time { return t0 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snaps := make(chan Snapshot, 10)
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, alloc, []string{"db", "web"}, func(s Snapshot) { snaps <- s }) }()

	first := <-snaps
	if first.Err != nil || len(first.Checks) != 2 {
		t.Fatalf("first snapshot %+v", first)
	}
	wantWeb := Check{Provider: ProviderConsul, ID: "_nomad-check-1", Name: "http", Service: "web", Task: "app", Status: "critical", Output: "connection refused"}
	wantDB := Check{Provider: ProviderConsul, ID: "_nomad-check-3", Name: "db-ping", Service: "db", Status: "passing"}
	if first.Checks[0] != wantWeb || first.Checks[1] != wantDB {
		t.Fatalf("first snapshot checks %+v", first.Checks)
	}
	fc.set("web", mine("passing", "HTTP GET: 200 OK"), other)
	// Every answer is emitted (the other service's query wakes too, unchanged): the change
	// arrives within the next few.
	for i := 0; ; i++ {
		s := <-snaps
		if s.Err != nil || len(s.Checks) != 2 || i == 3 {
			t.Fatalf("snapshot %d: %+v", i, s)
		}
		if s.Checks[0].Status == "passing" {
			break
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("watch returned %v", err)
	}
	// Blocking queries: after the first answer of a service, every read waits on an index.
	fc.mu.Lock()
	defer fc.mu.Unlock()
	waited := 0
	for _, i := range fc.indexes {
		if i != "" && i != "0" {
			waited++
		}
	}
	if len(fc.indexes) < 3 || waited < len(fc.indexes)-2 {
		t.Fatalf("request indexes %q: not blocking queries", fc.indexes)
	}
}

func TestConsulConfigOverrides(t *testing.T) {
	// The CLI reads the CONSUL_* environment into Env (cli's consulEnv).
	env := ConsulEnv{Address: "consul.env:8500", Token: "env-token", SSLVerify: "false"}
	cfg := ConsulConfig{Env: env}.apiConfig(true)
	if cfg.Address != "consul.env:8500" || cfg.Token != "env-token" || !cfg.TLSConfig.InsecureSkipVerify {
		t.Fatalf("environment not read: %+v", cfg)
	}
	verify := false
	cfg = ConsulConfig{Address: "consul.flag:8501", Token: "flag-token", CACert: "ca.pem", TLSServerName: "consul.internal", SkipVerify: &verify}.apiConfig(true)
	if cfg.Address != "consul.flag:8501" || cfg.Token != "flag-token" || cfg.TLSConfig.CAFile != "ca.pem" ||
		cfg.TLSConfig.Address != "consul.internal" || cfg.TLSConfig.InsecureSkipVerify || cfg.Scheme != "https" {
		t.Fatalf("flags did not override: %+v", cfg)
	}
}

// TestConsulEnvReadsAsConsulAPIDoes holds ConsulEnv to consul/api's own reading of the
// CONSUL_* environment: for each environment, the configuration built from what the CLI
// read equals DefaultNonPooledConfig's, field by field that a request uses.
func TestConsulEnvReadsAsConsulAPIDoes(t *testing.T) {
	// The variables ConsulEnv's fields hold, in the fields' order.
	names := []string{consulapi.HTTPAddrEnvName, consulapi.HTTPTokenEnvName, consulapi.HTTPTokenFileEnvName,
		consulapi.HTTPAuthEnvName, consulapi.HTTPSSLEnvName, consulapi.HTTPTLSServerName, consulapi.HTTPCAFile,
		consulapi.HTTPCAPath, consulapi.HTTPClientCert, consulapi.HTTPClientKey, consulapi.HTTPSSLVerifyEnvName,
		consulapi.HTTPNamespaceEnvName, consulapi.HTTPPartitionEnvName}
	if n := reflect.TypeFor[ConsulEnv]().NumField(); n != len(names) {
		t.Fatalf("ConsulEnv has %d fields, the test names %d variables", n, len(names))
	}
	environments := []map[string]string{
		{},
		{consulapi.HTTPAddrEnvName: "consul.service:8501", consulapi.HTTPTokenEnvName: "t0k3n", consulapi.HTTPNamespaceEnvName: "team", consulapi.HTTPPartitionEnvName: "p1"},
		{consulapi.HTTPAuthEnvName: "ops:s3cret:with-colon", consulapi.HTTPSSLEnvName: "1", consulapi.HTTPSSLVerifyEnvName: "0", consulapi.HTTPTokenFileEnvName: "/run/token"},
		{consulapi.HTTPAuthEnvName: "ops", consulapi.HTTPSSLEnvName: "yes", consulapi.HTTPSSLVerifyEnvName: "not-a-bool"},
		{consulapi.HTTPSSLEnvName: "TRUE", consulapi.HTTPSSLVerifyEnvName: "true", consulapi.HTTPTLSServerName: "consul.internal:8501",
			consulapi.HTTPCAFile: "ca.pem", consulapi.HTTPCAPath: "certs/", consulapi.HTTPClientCert: "c.pem", consulapi.HTTPClientKey: "k.pem"},
		{consulapi.HTTPAddrEnvName: "unix:///run/consul.sock"},
	}
	for i, vars := range environments {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			var env ConsulEnv
			fields := reflect.ValueOf(&env).Elem()
			for f, name := range names {
				t.Setenv(name, vars[name]) // consul/api reads "" as unset
				fields.Field(f).SetString(vars[name])
			}
			want, got := consulapi.DefaultNonPooledConfig(), env.apiConfig(false)
			if got.Address != want.Address || got.Scheme != want.Scheme || got.Token != want.Token || got.TokenFile != want.TokenFile ||
				got.Namespace != want.Namespace || got.Partition != want.Partition || !reflect.DeepEqual(got.TLSConfig, want.TLSConfig) ||
				!reflect.DeepEqual(got.HttpAuth, want.HttpAuth) {
				t.Errorf("from %v:\n got %+v (auth %+v)\nwant %+v (auth %+v)", vars, got, got.HttpAuth, want, want.HttpAuth)
			}
		})
	}
}

func TestConsulExplain(t *testing.T) {
	c := &Consul{addr: "https://consul:8501"}
	tests := []struct {
		err  error
		want string
	}{
		{consulapi.StatusError{Code: 403, Body: "ACL not found"}, "Consul at https://consul:8501 denied the request (403 ACL not found): set -consul-token or CONSUL_HTTP_TOKEN"},
		{consulapi.StatusError{Code: 500, Body: "rpc error"}, "Consul at https://consul:8501 answered 500: rpc error"},
		{errors.New("weird"), "Consul at https://consul:8501 cannot be read: weird (set -consul-address or CONSUL_HTTP_ADDR, or choose -health running)"},
	}
	for _, tt := range tests {
		if got := c.explain(tt.err).Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("explain(%v) = %q, want prefix %q", tt.err, got, tt.want)
		}
	}
}

func TestOffsetClock(t *testing.T) {
	local := t0
	c := NewOffsetClock(func() time.Time { return local })
	if !c.Now().Equal(t0) {
		t.Fatalf("unanchored clock %s", c.Now())
	}
	c.Observe(t0.Add(-3 * time.Second)) // Nomad is 3s behind (or the timestamp is old)
	c.Observe(t0.Add(-5 * time.Second)) // an older timestamp: no news
	local = t0.Add(time.Second)
	if got := c.Now(); !got.Equal(t0.Add(-2 * time.Second)) {
		t.Fatalf("now %s, want t0-2s", got.Sub(t0))
	}
	c.Observe(t0.Add(4 * time.Second)) // a fresher timestamp: Nomad is ahead
	if got := c.Now(); !got.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("now %s, want t0+4s", got.Sub(t0))
	}
}

func TestOwnerTask(t *testing.T) {
	for rest, want := range map[string]string{
		"app-web-http": "app", "my-task-web-http": "my-task", "group-web-web-http": "", "web-http": "", "app-web": "app",
	} {
		if got := ownerTask(rest, "web"); got != want {
			t.Errorf("ownerTask(%q) = %q, want %q", rest, got, want)
		}
	}
}

func TestConsulWatchSaysWhenACLsHideTheChecks(t *testing.T) {
	fc := newFakeConsul()
	fc.aclHide = true
	fc.set("web", &consulapi.HealthCheck{CheckID: "c", Name: "http", Status: "passing", ServiceID: "_nomad-task-a1-app-web-http", ServiceName: "web"})
	srv := httptest.NewServer(fc)
	defer srv.Close()
	c, err := NewConsul(ConsulConfig{Address: srv.URL, Wait: time.Second}, func() time.Time { return t0 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan Snapshot, 1)
	go func() {
		_ = c.Watch(ctx, "a1", []string{"web"}, func(s Snapshot) {
			select {
			case got <- s:
			default:
			}
		})
	}()
	s := <-got
	want := `hid the checks of service "web" from this token: set -consul-token`
	if s.Err == nil || !strings.Contains(s.Err.Error(), want) {
		t.Fatalf("snapshot %+v", s)
	}
	if err := c.Probe(ctx, "web"); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("probe: %v", err)
	}
}

// TestNextRead: Nomad's checks are read just after their next result is due (a run an
// interval after the last began, within the second it is stamped with), at a retry's pace
// while it is late, never more than an interval apart.
func TestNextRead(t *testing.T) {
	every := 5 * time.Second
	res := func(ran float64) Check { return Check{Provider: ProviderNomad, Time: at(ran).Truncate(time.Second)} }
	tests := []struct {
		name string
		s    Snapshot
		want time.Duration
	}{
		{"due later", Snapshot{At: at(2), Checks: []Check{res(0.2)}}, 4*time.Second + 100*time.Millisecond},
		{"never more than an interval", Snapshot{At: at(0.5), Checks: []Check{res(0.2)}}, every},
		{"late: retry", Snapshot{At: at(6.5), Checks: []Check{res(0.2)}}, time.Second},
		{"the soonest of two", Snapshot{At: at(2.5), Checks: []Check{res(1.5), res(0.2)}}, 3*time.Second + 600*time.Millisecond},
		{"a check that runs less often does not set the pace", Snapshot{At: at(12), Checks: []Check{res(0.2), res(9)}}, 3*time.Second + 100*time.Millisecond},
		{"no result yet: an interval", Snapshot{At: at(1), Checks: []Check{{Provider: ProviderNomad}}}, every},
		{"a failed read: an interval", Snapshot{At: at(1), Err: errConsulDn}, every},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextRead(tt.s, every); got != tt.want {
				t.Fatalf("next read in %s, want %s", got, tt.want)
			}
		})
	}
}
