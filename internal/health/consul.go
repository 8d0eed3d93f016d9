package health

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// ConsulConfig says how to reach Consul. Its fields are the overrides (the flags:
// -consul-address, -consul-token, -consul-ca-cert, -consul-client-cert, -consul-client-key,
// -consul-tls-server-name, -consul-tls-skip-verify); empty fields keep what Env says.
type ConsulConfig struct {
	Address       string // host:port, or a URL with its scheme
	Token         string
	CACert        string
	ClientCert    string
	ClientKey     string
	TLSServerName string
	// SkipVerify, when set, overrides CONSUL_HTTP_SSL_VERIFY.
	SkipVerify *bool
	// Env is what the CONSUL_* environment says, under the fields above (and, for the
	// address, under the one a restart recorded: ConsulDialer.Dial).
	Env ConsulEnv
	// Wait is the longest a blocking query waits for a change (default one minute).
	Wait time.Duration
	// RequestTimeout bounds the wait for each of Consul's answers (-request-timeout; see
	// upstream.Guard); zero: upstream.DefaultTimeout.
	RequestTimeout time.Duration
}

// ConsulEnv is what Consul's own tools read from the CONSUL_* environment (consul/api's
// DefaultConfig), as the CLI read it: nothing below internal/cli reads the environment.
// The values are kept as written; the booleans are read as consul/api reads them.
type ConsulEnv struct {
	Address       string // CONSUL_HTTP_ADDR
	Token         string // CONSUL_HTTP_TOKEN
	TokenFile     string // CONSUL_HTTP_TOKEN_FILE
	Auth          string // CONSUL_HTTP_AUTH: user, or user:password
	SSL           string // CONSUL_HTTP_SSL: https when true
	TLSServerName string // CONSUL_TLS_SERVER_NAME
	CACert        string // CONSUL_CACERT
	CAPath        string // CONSUL_CAPATH
	ClientCert    string // CONSUL_CLIENT_CERT
	ClientKey     string // CONSUL_CLIENT_KEY
	SSLVerify     string // CONSUL_HTTP_SSL_VERIFY: anything but true skips verification
	Namespace     string // CONSUL_NAMESPACE
	Partition     string // CONSUL_PARTITION
}

// defaultConsulAddress is where consul/api looks for Consul when nothing says: the local
// agent.
const defaultConsulAddress = "localhost:8500"

// apiConfig is consul/api's DefaultConfig (pooled) or DefaultNonPooledConfig, read from e
// rather than from the process's environment.
func (e ConsulEnv) apiConfig(pooled bool) *consulapi.Config {
	tr := cleanhttp.DefaultTransport()
	if pooled {
		tr = cleanhttp.DefaultPooledTransport()
	}
	cfg := &consulapi.Config{Address: cmp.Or(e.Address, defaultConsulAddress), Scheme: "http", Transport: tr,
		Token: e.Token, TokenFile: e.TokenFile, Namespace: e.Namespace, Partition: e.Partition}
	if e.Auth != "" {
		user, password, _ := strings.Cut(e.Auth, ":")
		cfg.HttpAuth = &consulapi.HttpBasicAuth{Username: user, Password: password}
	}
	if ssl, _ := strconv.ParseBool(e.SSL); ssl {
		cfg.Scheme = "https"
	}
	cfg.TLSConfig.Address = e.TLSServerName
	cfg.TLSConfig.CAFile = e.CACert
	cfg.TLSConfig.CAPath = e.CAPath
	cfg.TLSConfig.CertFile = e.ClientCert
	cfg.TLSConfig.KeyFile = e.ClientKey
	if e.SSLVerify != "" {
		// As consul/api: a value that is not a boolean reads as false.
		verify, _ := strconv.ParseBool(e.SSLVerify)
		cfg.TLSConfig.InsecureSkipVerify = !verify
	}
	return cfg
}

// apiConfig merges the overrides onto the environment's configuration.
func (c ConsulConfig) apiConfig(pooled bool) *consulapi.Config {
	cfg := c.Env.apiConfig(pooled)
	cfg.Address = cmp.Or(c.Address, cfg.Address)
	cfg.Token = cmp.Or(c.Token, cfg.Token)
	cfg.TLSConfig.CAFile = cmp.Or(c.CACert, cfg.TLSConfig.CAFile)
	cfg.TLSConfig.CertFile = cmp.Or(c.ClientCert, cfg.TLSConfig.CertFile)
	cfg.TLSConfig.KeyFile = cmp.Or(c.ClientKey, cfg.TLSConfig.KeyFile)
	cfg.TLSConfig.Address = cmp.Or(c.TLSServerName, cfg.TLSConfig.Address)
	if c.SkipVerify != nil {
		cfg.TLSConfig.InsecureSkipVerify = *c.SkipVerify
	}
	// A client certificate or CA given without a scheme means TLS, as Consul's CLI
	// understands CONSUL_CACERT next to CONSUL_HTTP_SSL.
	if !strings.Contains(cfg.Address, "://") && (c.CACert != "" || c.ClientCert != "") {
		cfg.Scheme = "https"
	}
	return cfg
}

// ConsulDialer makes a process's Consul check sources on one configuration: the
// assembly (internal/cli) builds it from the flags and the environment and hands it to the
// engine, which asks for the Consul a restart recorded.
type ConsulDialer struct {
	Config ConsulConfig
}

// Dial returns a check source on Consul at the configuration's address when it has one,
// else at address (where a restart's planner reached Consul; "" when it names none), else
// at the environment's or the local agent's. clock is Nomad's clock, which stamps
// snapshots; log may be nil. Unpooled (pooled false), its idle connections do not outlive
// it: for a source made and dropped often (one per batch). It does not contact Consul: see
// Probe.
func (d ConsulDialer) Dial(address string, clock Clock, log *slog.Logger, pooled bool) (*Consul, error) {
	cfg := d.Config
	cfg.Address = cmp.Or(cfg.Address, address)
	return newConsul(cfg, clock, log, pooled)
}

// Consul reads the checks of allocations' Consul services from Consul's health API, with
// blocking queries.
type Consul struct {
	client *consulapi.Client
	addr   string
	clock  Clock
	wait   time.Duration
	log    *slog.Logger
}

// NewConsul returns a Consul check source. clock is Nomad's clock, which stamps snapshots
// (Consul's answers carry no time); log may be nil. It does not contact Consul: see Probe.
func NewConsul(cfg ConsulConfig, clock Clock, log *slog.Logger) (*Consul, error) {
	return newConsul(cfg, clock, log, true)
}

func newConsul(cfg ConsulConfig, clock Clock, log *slog.Logger, pooled bool) (*Consul, error) {
	client, addr, err := cfg.client(pooled)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	wait := cfg.Wait
	if wait <= 0 {
		wait = time.Minute
	}
	return &Consul{client: client, addr: addr, clock: clock, wait: wait, log: log}, nil
}

// client is a Consul client configured as the gates' source is (the overrides over the
// environment's configuration), and its address for messages. Unpooled (pooled false), its
// idle connections do not outlive it: for a client made and dropped often.
func (c ConsulConfig) client(pooled bool) (*consulapi.Client, string, error) {
	ac := c.apiConfig(pooled)
	addr := ac.Address
	if !strings.Contains(addr, "://") {
		addr = ac.Scheme + "://" + addr
	}
	// The client is built here, as consul/api would, so that every request goes through
	// the guard of Consul's deadlines; a unix socket is dialled by the transport, as
	// consul/api does for a unix:// address.
	tr := ac.Transport
	if sock, ok := strings.CutPrefix(ac.Address, "unix://"); ok {
		tr = cleanhttp.DefaultTransport()
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		ac.Address, ac.Scheme = "127.0.0.1", "http"
	}
	hc, err := consulapi.NewHttpClient(tr, ac.TLSConfig)
	if err != nil {
		return nil, addr, fmt.Errorf("configuring the Consul client for %s: %w", addr, err)
	}
	hc.Transport = upstream.Guard(hc.Transport, upstream.Consul(addr, c.RequestTimeout))
	ac.HttpClient = hc
	client, err := consulapi.NewClient(ac)
	if err != nil {
		return nil, addr, fmt.Errorf("configuring the Consul client for %s: %w", addr, err)
	}
	return client, addr, nil
}

// SharedClient is sourcewatch's Options.Consul on the Consul c names: one client, made at
// the first Consul source, for every datacenter (Consul takes the datacenter as a
// parameter of each request); pooled for a long-lived watch. Nil when c names no address:
// sources then say so.
func (c ConsulConfig) SharedClient(pooled bool) func(datacenter string) (*consulapi.Client, error) {
	if c.Address == "" {
		return nil
	}
	client := sync.OnceValues(func() (*consulapi.Client, error) {
		cl, _, err := c.client(pooled)
		return cl, err
	})
	return func(string) (*consulapi.Client, error) { return client() }
}

// Address is the Consul address in use, for messages.
func (c *Consul) Address() string { return c.addr }

// Probe checks, before the first batch, that Consul answers and has a leader, and that
// the token may read the checks of the given services (Consul hides what a token may not
// read rather than refusing). Its error says what to do in the operator's words ("Consul
// at http://127.0.0.1:8500 refused the connection: set -consul-address or
// CONSUL_HTTP_ADDR, or choose -health running").
func (c *Consul) Probe(ctx context.Context, services ...string) error {
	// Recorded, so that an answer that is not Consul's is named for what it was.
	ctx = upstream.Record(ctx)
	leader, err := c.client.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return c.explain(upstream.Explain(ctx, err))
	}
	if leader == "" {
		return fmt.Errorf("Consul at %s has no leader, so its health checks cannot be read: wait for it to elect one, or choose -health running", c.addr)
	}
	for _, svc := range services {
		checks, meta, err := c.client.Health().Checks(svc, (&consulapi.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("reading Consul checks of service %q: %w", svc, c.explain(upstream.Explain(ctx, err)))
		}
		if len(checks) == 0 && meta.ResultsFilteredByACLs {
			return c.hidden(svc)
		}
	}
	return nil
}

// ServiceCheck is one check of one instance of a Consul service, with the ID Nomad
// registered the instance under (it starts with the allocation's ServicePrefix).
type ServiceCheck struct {
	ServiceID string
	Check
}

// ServiceChecks reads the checks of every instance of a Consul service once (no blocking
// query: for a caller that wants the answer now, such as the availability budget).
func (c *Consul) ServiceChecks(ctx context.Context, service string) ([]ServiceCheck, error) {
	ctx = upstream.Record(ctx)
	checks, meta, err := c.client.Health().Checks(service, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		if ue, ok := upstream.Find(upstream.Explain(ctx, err)); ok {
			return nil, fmt.Errorf("reading Consul checks of service %q: %w", service, ue)
		}
		return nil, fmt.Errorf("reading Consul checks of service %q at %s: %w", service, c.addr, err)
	}
	if len(checks) == 0 && meta != nil && meta.ResultsFilteredByACLs {
		// Consul hides what the token may not read rather than refusing.
		return nil, fmt.Errorf("the checks of service %q are hidden from this token by Consul at %s: set -consul-token or CONSUL_HTTP_TOKEN to a token with service:read and node:read", service, c.addr)
	}
	out := make([]ServiceCheck, 0, len(checks))
	for _, hc := range checks {
		if hc == nil {
			continue
		}
		out = append(out, ServiceCheck{ServiceID: hc.ServiceID, Check: Check{Provider: ProviderConsul, ID: hc.CheckID,
			Name: hc.Name, Service: hc.ServiceName, Status: hc.Status, Output: hc.Output}})
	}
	return out, nil
}

func (c *Consul) hidden(service string) error {
	return fmt.Errorf("Consul at %s hid the checks of service %q from this token: set -consul-token or CONSUL_HTTP_TOKEN to a token with service:read and node:read, or choose -health running", c.addr, service)
}

// explain turns a transport or HTTP error into an actionable one.
func (c *Consul) explain(err error) error {
	const alt = "or choose -health running"
	var se consulapi.StatusError
	var dns *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var ne net.Error
	if ue, ok := upstream.Find(err); ok {
		return ue // one line naming Consul's address and the fix
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded) && !isNetTimeout(err):
		return err
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("Consul at %s refused the connection: set -consul-address or CONSUL_HTTP_ADDR, %s", c.addr, alt)
	case errors.As(err, &dns):
		return fmt.Errorf("Consul at %s: cannot resolve %q: set -consul-address or CONSUL_HTTP_ADDR, %s", c.addr, dns.Name, alt)
	case errors.As(err, &se) && (se.Code == 401 || se.Code == 403):
		return fmt.Errorf("Consul at %s denied the request (%d %s): set -consul-token or CONSUL_HTTP_TOKEN to a token with service:read and node:read, %s",
			c.addr, se.Code, firstLine(se.Body), alt)
	case errors.As(err, &se):
		return fmt.Errorf("Consul at %s answered %d: %s", c.addr, se.Code, firstLine(se.Body))
	case errors.As(err, &unknownCA), errors.As(err, &hostname):
		return fmt.Errorf("Consul at %s: TLS verification failed (%v): set -consul-ca-cert or CONSUL_CACERT, or -consul-tls-server-name, %s", c.addr, err, alt)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("Consul at %s did not answer in time: check -consul-address or CONSUL_HTTP_ADDR, %s", c.addr, alt)
	}
	var ue *url.Error
	if errors.As(err, &ue) && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("Consul at %s speaks plain HTTP: use an http:// address or unset CONSUL_HTTP_SSL, %s", c.addr, alt)
	}
	return fmt.Errorf("Consul at %s cannot be read: %w (set -consul-address or CONSUL_HTTP_ADDR, %s)", c.addr, err, alt)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ServicePrefix is the prefix of the IDs Nomad registers an allocation's services under in
// Consul: _nomad-task-<alloc ID>-<task, or group-<group>>-<service>-<port label>.
func ServicePrefix(allocID string) string { return "_nomad-task-" + allocID + "-" }

// ConsulServices lists the distinct Consul service names of the specs, to watch.
func ConsulServices(specs []CheckSpec) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range specs {
		if s.Provider == ProviderConsul && !seen[s.Service] {
			seen[s.Service] = true
			out = append(out, s.Service)
		}
	}
	sort.Strings(out)
	return out
}

// Watch follows the checks of the allocation's instances of the named Consul services
// with one blocking query per service, and hands emit a snapshot of all of them each time
// one answers (once every service has answered): on a change, or when Consul's wait ends. A failed query is emitted as a snapshot
// with Err and retried with backoff. It runs until ctx ends and returns ctx's error.
func (c *Consul) Watch(ctx context.Context, allocID string, services []string, emit func(Snapshot)) error {
	for _, s := range services {
		if Unresolved(s) {
			return fmt.Errorf("watching Consul checks of allocation %s: the service name %q holds a variable nomad-restart cannot resolve; choose -health running", shortID(allocID), s)
		}
	}
	if len(services) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	m := &merger{allocID: allocID, emit: emit, clock: c.clock, latest: map[string][]Check{}, errs: map[string]error{}, want: len(services)}
	var wg sync.WaitGroup
	for _, svc := range services {
		wg.Go(func() {
			c.watchService(ctx, allocID, svc, m)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// watchService follows the checks of one service with blocking queries (cluster.Watch:
// Consul's rules for the index, backoff after failures) and hands each answer, or failure,
// to m.
func (c *Consul) watchService(ctx context.Context, allocID, service string, m *merger) {
	prefix := ServicePrefix(allocID)
	// A failure is the gate's to judge (it is emitted); the watch itself resumes, paced,
	// while ctx lasts, as Nomad's watches do.
	w := &cluster.Watch{What: "watching Consul checks", Log: c.log.With("alloc", allocID, "service", service),
		Policy: cluster.RetryPolicy{Initial: 100 * time.Millisecond, Max: 10 * time.Second}}
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		q := (&consulapi.QueryOptions{WaitIndex: index, WaitTime: c.wait}).WithContext(ctx)
		checks, meta, err := c.client.Health().Checks(service, q)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err != nil {
			err = fmt.Errorf("reading Consul checks of service %q: %w", service, c.explain(err))
			m.update(service, nil, err)
			return 0, err
		}
		var mine []Check
		for _, hc := range checks {
			if hc == nil || !strings.HasPrefix(hc.ServiceID, prefix) {
				continue
			}
			mine = append(mine, Check{Provider: ProviderConsul, ID: hc.CheckID, Name: hc.Name, Service: hc.ServiceName,
				Task: ownerTask(hc.ServiceID[len(prefix):], hc.ServiceName), Status: hc.Status, Output: hc.Output})
		}
		if len(mine) == 0 && meta.ResultsFilteredByACLs {
			// Consul hides what the token may not read instead of refusing: without this
			// the gate would wait for checks it is not allowed to see.
			m.update(service, nil, c.hidden(service))
		} else {
			m.update(service, mine, nil)
		}
		return meta.LastIndex, nil
	})
}

// ownerTask reads the task out of the rest of a service ID (<task>-<service>-<port>);
// group services ("group-<group>-...") and IDs it cannot read give "".
func ownerTask(rest, service string) string {
	if strings.HasPrefix(rest, "group-") {
		return ""
	}
	if i := strings.Index(rest, "-"+service); i > 0 {
		return rest[:i]
	}
	return ""
}

// merger joins the per-service answers into one snapshot of the allocation.
type merger struct {
	allocID string
	emit    func(Snapshot)
	clock   Clock
	want    int

	mu     sync.Mutex
	latest map[string][]Check
	errs   map[string]error
}

func (m *merger) update(service string, checks []Check, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errs[service] = err
	} else {
		delete(m.errs, service)
		m.latest[service] = checks
	}
	if len(m.latest) < m.want && len(m.errs) == 0 {
		return // not every service has answered yet: that is no news
	}
	s := Snapshot{Provider: ProviderConsul, AllocID: m.allocID, At: m.clock()}
	names := make([]string, 0, len(m.errs))
	for n := range m.errs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 0 {
		s.Err = m.errs[names[0]]
	} else {
		for _, cs := range m.latest {
			s.Checks = append(s.Checks, cs...)
		}
		sort.Slice(s.Checks, func(i, j int) bool { return s.Checks[i].ID < s.Checks[j].ID })
	}
	// Every answer is emitted, changed or not: a blocking query also ends when its wait
	// runs out, and the fresh time tells the gate the results still hold.
	// Emitting under the lock keeps snapshots in order; emit must not call back here.
	m.emit(s)
}
