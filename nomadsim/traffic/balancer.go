// Package traffic is a load balancer in front of one service of a Nomad cluster (nomadsim
// with Options.ServeInstances, whose instances answer where the catalogs say they are):
// it reads the service's instances from a catalog as real balancers do, sends steady
// traffic to them and counts the requests its clients would see fail. It measures what a
// restart costs a service's clients, in requests rather than instances: the tests'
// (internal/simtest wraps it) and the demo's.
package traffic

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// Balancer is a load balancer in front of one service, as Traefik's catalog providers,
// Fabio or consul-template with HAProxy are: every Refresh it reads the service's instances
// from a catalog, and it sends traffic of its own to them, one GET / every Every to the
// next instance in turn, and counts what its clients would see fail: a refused connection,
// a timeout, an answer other than 2xx, or no instance to send to (a balancer answers 503
// then). It does not retry a failed request on another instance.
//
// The catalog is Consul's health API (/v1/health/service/<name>?passing: instances whose
// checks all pass) when ConsulAddr is set, else Nomad's service table
// (/v1/service/<name>), which knows nothing of health: a balancer reading it sends to every
// registered instance, ready or not.
//
// Its durations are in simulated time, which runs Scale times faster than real time: with
// Scale set to nomadsim's TimeScale, the balancer refreshes and sends as a real one would
// in front of a real cluster, so that the race between a catalog change and the next
// refresh (what decides whether a request reaches an instance that is going away) keeps
// its proportions. ConsulBalancer and NomadBalancer set it from the cluster.
//
// Set the fields before Start; Start and Stop once each. Reset starts the counts over (once
// the instances answer, say: Answering).
type Balancer struct {
	Service    string
	ConsulAddr string // Consul's HTTP API: read healthy instances there
	NomadAddr  string // Nomad's HTTP API: read its service table when ConsulAddr is empty
	// Via, when set, is a real balancer's frontend (host:port) to send every request
	// through instead of reading a catalog: the Balancer is then only its clients, counting
	// what fails through it (HAProxy in the tests).
	Via       string
	Namespace string // Nomad's namespace of the service ("" is default)
	Token     string // Nomad's token, if the cluster enforces ACLs

	Scale   float64       // simulated seconds per real second (default 1)
	Refresh time.Duration // how often the list of instances is read again (default 1s)
	// Throttle is how long after applying a new list the balancer holds the next one
	// back, as Traefik's providers.providersThrottleDuration (2s by default) does: a list
	// read within it is applied when it ends (the latest read wins). 0: none.
	Throttle time.Duration
	Every    time.Duration // how often a request is sent (default 10ms)
	Timeout  time.Duration // a request's timeout, connecting included (default 1s; see minRealTimeout)
	// Census, when set, is how often the instances that answer are counted
	// (Result.MinAnswering): every address the catalog ever registered for the service,
	// health aside, is sent GET /. The list the balancer sends to cannot say it: an instance
	// answers before it is listed (warming up behind Consul's check) and after it left
	// (through its shutdown_delay). An allocation keeps its address for its life, and a
	// stopped one refuses.
	Census time.Duration

	cancel   context.CancelFunc
	loops    sync.WaitGroup
	inflight sync.WaitGroup
	client   *http.Client
	start    time.Time // real time

	mu        sync.Mutex
	instances []string        // host:port, sorted
	applied   time.Time       // real time the list last changed (Throttle)
	pending   []string        // a list held back by Throttle, applied when it ends
	held      bool            // a timer applies pending
	ever      map[string]bool // every address the catalog registered (Census)
	sent      map[string]int  // requests sent to each instance since Start (Metrics)
	next      int
	epoch     int // counts of requests sent before the latest Reset are dropped
	res       Result
}

// Result is what a Balancer counted from Start (or the latest Reset) to Stop.
type Result struct {
	Requests int // requests its clients sent
	Failed   int // of them, those that failed, by kind below
	// Refused requests found nothing listening, TimedOut ones no answer within Timeout,
	// Status ones an answer other than 2xx, NoInstance ones no instance in the list, and
	// OtherErr ones another error (a connection reset, say).
	Refused, TimedOut, Status, NoInstance, OtherErr int
	// FailedPerSecond and RequestsPerSecond count per second of simulated time since Start
	// (or the latest Reset), by when the request was sent.
	FailedPerSecond, RequestsPerSecond []int
	// Refreshes counts the catalog reads, RefreshErrors those that failed (the list is
	// kept then, as balancers keep their last configuration).
	Refreshes, RefreshErrors int
	// MinInstances is the fewest instances the list held after the first refresh.
	MinInstances int
	// MinAnswering is the fewest instances answering at a Census count; -1 when none was
	// counted (no Census, or none since the latest Reset).
	MinAnswering int
	// Elapsed is the simulated time from Start (or the latest Reset) to Stop.
	Elapsed time.Duration
}

// FailedRatio is Failed over Requests (0 with no request).
func (r Result) FailedRatio() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Failed) / float64(r.Requests)
}

func (r Result) String() string {
	return fmt.Sprintf("%d/%d failed (refused %d, timed out %d, bad status %d, no instance %d, other %d)",
		r.Failed, r.Requests, r.Refused, r.TimedOut, r.Status, r.NoInstance, r.OtherErr)
}

// ConsulBalancer is a Balancer of service that reads c's Consul (instances passing their
// checks), at c's time scale.
func ConsulBalancer(c *nomadsim.Cluster, service string) *Balancer {
	return &Balancer{Service: service, ConsulAddr: c.ConsulAddr(), Scale: c.TimeScale()}
}

// NomadBalancer is a Balancer of service that reads c's own service table (Nomad's
// provider: every registered instance), at c's time scale.
func NomadBalancer(c *nomadsim.Cluster, service string) *Balancer {
	return &Balancer{Service: service, NomadAddr: c.Addr(), Scale: c.TimeScale()}
}

// minRealTimeout is the shortest a request's timeout gets in real time, however fast the
// simulation runs: nothing in nomadsim hangs (an instance refuses or answers at once), so
// a request slower than that measures the machine's load, not the restart.
const minRealTimeout = time.Second

func (b *Balancer) defaults() {
	if b.Scale <= 0 {
		b.Scale = 1
	}
	if b.Refresh <= 0 {
		b.Refresh = time.Second
	}
	if b.Every <= 0 {
		b.Every = 10 * time.Millisecond
	}
	if b.Timeout <= 0 {
		b.Timeout = time.Second
	}
}

// real is the real duration of a simulated one.
func (b *Balancer) real(d time.Duration) time.Duration { return time.Duration(float64(d) / b.Scale) }

// Start reads the catalog once, then refreshes and sends until Stop or ctx's end. It fails
// if the first read does.
func (b *Balancer) Start(ctx context.Context) error {
	b.defaults()
	read, err := b.reader(false)
	if err != nil {
		return err
	}
	var readAll func(context.Context) ([]string, error)
	if b.Census > 0 {
		if readAll, err = b.reader(true); err != nil {
			return err
		}
	}
	timeout := max(b.real(b.Timeout), minRealTimeout)
	b.client = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     time.Minute,
		},
	}
	ctx, b.cancel = context.WithCancel(ctx)
	if err := b.refresh(ctx, read); err != nil {
		b.cancel()
		return fmt.Errorf("balancer of %s: first read of the catalog: %w", b.Service, err)
	}
	b.mu.Lock()
	b.res.MinInstances, b.res.MinAnswering, b.ever = len(b.instances), -1, map[string]bool{}
	b.mu.Unlock()
	if readAll != nil {
		b.loops.Add(1)
		go func() {
			defer b.loops.Done()
			b.every(ctx, b.Census, func() { b.census(ctx, readAll) })
		}()
	}
	b.start = time.Now()
	b.loops.Add(2)
	go func() {
		defer b.loops.Done()
		b.every(ctx, b.Refresh, func() { _ = b.refresh(ctx, read) })
	}()
	go func() {
		defer b.loops.Done()
		b.every(ctx, b.Every, b.send)
	}()
	return nil
}

// every calls f every simulated d until ctx ends.
func (b *Balancer) every(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(max(b.real(d), time.Microsecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// Stop ends the traffic, waits for the requests in flight and returns the counts.
func (b *Balancer) Stop() Result {
	b.cancel()
	b.loops.Wait()
	b.inflight.Wait()
	b.client.CloseIdleConnections()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.res
	r.Elapsed = time.Duration(float64(time.Since(b.start)) * b.Scale)
	r.FailedPerSecond = slices.Clone(r.FailedPerSecond)
	r.RequestsPerSecond = slices.Clone(r.RequestsPerSecond)
	return r
}

// Reset starts the counts over, from now: what was sent before (while the instances
// warmed up, say) no longer counts, nor do the answers still to come for it.
func (b *Balancer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch++
	b.res = Result{MinInstances: len(b.instances), MinAnswering: -1, Refreshes: b.res.Refreshes, RefreshErrors: b.res.RefreshErrors}
	b.start = time.Now()
}

// Answering reports whether the balancer lists n instances as of its last refresh and
// each answers GET / with a 2xx now: every instance serves again, as the balancer sees
// them.
func (b *Balancer) Answering(n int) bool {
	list := b.Instances()
	if len(list) != n {
		return false
	}
	for _, target := range list {
		if b.get(target) != outcomeOK {
			return false
		}
	}
	return true
}

// Instances is the balancer's list of instances (host:port) as of its last refresh.
func (b *Balancer) Instances() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.instances)
}

// census counts the instances that answer among every address the catalog registered.
func (b *Balancer) census(ctx context.Context, readAll func(context.Context) ([]string, error)) {
	rctx, cancel := context.WithTimeout(ctx, max(b.real(b.Census), time.Second))
	list, err := readAll(rctx)
	cancel()
	b.mu.Lock()
	if err == nil {
		for _, addr := range list {
			b.ever[addr] = true
		}
	}
	addrs := slices.Sorted(maps.Keys(b.ever))
	epoch := b.epoch
	b.mu.Unlock()
	n := 0
	for _, addr := range addrs {
		if b.get(addr) == outcomeOK {
			n++
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx.Err() != nil || epoch != b.epoch {
		return // cut by Stop, or begun before the latest Reset
	}
	if b.res.MinAnswering < 0 || n < b.res.MinAnswering {
		b.res.MinAnswering = n
	}
}

// reader returns the function that reads the service's instances from the catalog: those
// a balancer sends to, or with all every registered one, health aside.
func (b *Balancer) reader(all bool) (func(ctx context.Context) ([]string, error), error) {
	if b.Via != "" {
		return func(context.Context) ([]string, error) { return []string{b.Via}, nil }, nil
	}
	if b.ConsulAddr != "" {
		cfg := consulapi.DefaultNonPooledConfig()
		cfg.Address = b.ConsulAddr
		client, err := consulapi.NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("balancer of %s: Consul client: %w", b.Service, err)
		}
		if all {
			return func(ctx context.Context) ([]string, error) {
				entries, _, err := client.Catalog().Service(b.Service, "", (&consulapi.QueryOptions{}).WithContext(ctx))
				if err != nil {
					return nil, err
				}
				out := make([]string, 0, len(entries))
				for _, e := range entries {
					addr := cmp.Or(e.ServiceAddress, e.Address)
					out = append(out, net.JoinHostPort(addr, strconv.Itoa(e.ServicePort)))
				}
				return out, nil
			}, nil
		}
		return func(ctx context.Context) ([]string, error) {
			entries, _, err := client.Health().Service(b.Service, "", true, (&consulapi.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return nil, err
			}
			out := make([]string, 0, len(entries))
			for _, e := range entries {
				addr := e.Service.Address
				if addr == "" && e.Node != nil {
					addr = e.Node.Address
				}
				out = append(out, net.JoinHostPort(addr, strconv.Itoa(e.Service.Port)))
			}
			return out, nil
		}, nil
	}
	if b.NomadAddr == "" {
		return nil, fmt.Errorf("balancer of %s: neither a Consul nor a Nomad address", b.Service)
	}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.SecretID, cfg.Region, cfg.Namespace = b.NomadAddr, b.Token, "", b.Namespace
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("balancer of %s: Nomad client: %w", b.Service, err)
	}
	return func(ctx context.Context) ([]string, error) {
		regs, _, err := client.Services().Get(b.Service, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(regs))
		for _, r := range regs {
			out = append(out, net.JoinHostPort(r.Address, strconv.Itoa(r.Port)))
		}
		return out, nil
	}, nil
}

// refresh reads the catalog and replaces the list; a failed read keeps the old one.
func (b *Balancer) refresh(ctx context.Context, read func(context.Context) ([]string, error)) error {
	rctx, cancel := context.WithTimeout(ctx, max(b.real(b.Refresh), time.Second))
	defer cancel()
	list, err := read(rctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.res.Refreshes++
	if err != nil {
		if ctx.Err() == nil {
			b.res.RefreshErrors++
		}
		return err
	}
	slices.Sort(list)
	if slices.Equal(list, b.instances) {
		b.pending = nil // what was held back changed back: nothing to apply
		return nil
	}
	if wait := b.real(b.Throttle) - time.Since(b.applied); b.Throttle > 0 && !b.applied.IsZero() && wait > 0 {
		b.pending = list
		if !b.held {
			b.held = true
			time.AfterFunc(wait, func() {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.held = false
				if b.pending != nil && ctx.Err() == nil {
					b.apply(b.pending)
				}
				b.pending = nil
			})
		}
		return nil
	}
	b.pending = nil
	b.apply(list)
	return nil
}

// apply makes list the instances the balancer sends to; b.mu is held.
func (b *Balancer) apply(list []string) {
	b.instances, b.applied = list, time.Now()
	if !b.start.IsZero() {
		b.res.MinInstances = min(b.res.MinInstances, len(list))
	}
}

// TraefikAPI serves the balancer's list as Traefik's API does (GET /api/http/services:
// pkg/api/handler_http.go's serviceRepresentation, one service of the balancer's name
// whose loadBalancer.servers are its instances' URLs, all "UP"), so that a drain can wait
// on it as on a real Traefik (-drain-until traefik=...).
func (b *Balancer) TraefikAPI() http.Handler {
	type server struct {
		URL string `json:"url"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/http/services" {
			http.NotFound(w, r)
			return
		}
		servers, status := []server{}, map[string]string{}
		for _, addr := range b.Instances() {
			u := "http://" + addr
			servers = append(servers, server{URL: u})
			status[u] = "UP"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode([]any{map[string]any{
			"loadBalancer": map[string]any{"servers": servers, "passHostHeader": true},
			"serverStatus": status, "status": "enabled", "usedBy": []string{b.Service + "@consulcatalog"},
			"name": b.Service + "@consulcatalog", "provider": "consulcatalog", "type": "loadbalancer",
		}})
	})
}

// Metrics serves, on GET /metrics in Prometheus's text format, the requests the balancer
// sent to each instance since Start, as a counter by service and server (host:port),
// Reset aside: balancer_server_requests_total{service="web",server="10.0.0.5:8080"}. An
// instance the balancer dropped keeps its series, which stops growing, so that a drain can
// wait on a Prometheus scraping it (-drain-until prometheus:sum(rate(...[3s])) == 0), as on
// a real balancer's per-server counters (HAProxy's haproxy_server_http_responses_total).
func (b *Balancer) Metrics() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		b.mu.Lock()
		sent := maps.Clone(b.sent)
		b.mu.Unlock()
		var out strings.Builder
		out.WriteString("# HELP balancer_server_requests_total Requests the balancer sent to each server of the service.\n")
		out.WriteString("# TYPE balancer_server_requests_total counter\n")
		for _, server := range slices.Sorted(maps.Keys(sent)) {
			fmt.Fprintf(&out, "balancer_server_requests_total{service=%s,server=%s} %d\n", labelValue(b.Service), labelValue(server), sent[server])
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, out.String())
	})
}

// labelValue is v as a label value of Prometheus's text format: quoted, its backslashes,
// double quotes and line feeds escaped.
func labelValue(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

// send sends one request to the next instance, in the background.
func (b *Balancer) send() {
	b.mu.Lock()
	sec := b.second()
	if len(b.instances) == 0 {
		b.count(sec, &b.res.NoInstance)
		b.mu.Unlock()
		return
	}
	target := b.instances[b.next%len(b.instances)]
	b.next++
	if b.sent == nil {
		b.sent = map[string]int{}
	}
	b.sent[target]++
	epoch := b.epoch
	b.mu.Unlock()
	b.inflight.Go(func() {
		kind := b.get(target)
		b.mu.Lock()
		defer b.mu.Unlock()
		if epoch != b.epoch {
			return
		}
		switch kind {
		case outcomeOK:
			b.count(sec, nil)
		case outcomeRefused:
			b.count(sec, &b.res.Refused)
		case outcomeTimeout:
			b.count(sec, &b.res.TimedOut)
		case outcomeStatus:
			b.count(sec, &b.res.Status)
		default:
			b.count(sec, &b.res.OtherErr)
		}
	})
}

// second is the simulated second since Start the present falls in; callers hold b.mu.
func (b *Balancer) second() int {
	return int(float64(time.Since(b.start)) * b.Scale / float64(time.Second))
}

// count records a request sent in second sec, failed of kind (nil: it succeeded); callers
// hold b.mu.
func (b *Balancer) count(sec int, kind *int) {
	for len(b.res.RequestsPerSecond) <= sec {
		b.res.RequestsPerSecond = append(b.res.RequestsPerSecond, 0)
		b.res.FailedPerSecond = append(b.res.FailedPerSecond, 0)
	}
	b.res.Requests++
	b.res.RequestsPerSecond[sec]++
	if kind == nil {
		return
	}
	*kind++
	b.res.Failed++
	b.res.FailedPerSecond[sec]++
}

type outcome int

const (
	outcomeOK outcome = iota
	outcomeRefused
	outcomeTimeout
	outcomeStatus
	outcomeOther
)

// get sends GET / to target and says how it went.
func (b *Balancer) get(target string) outcome {
	resp, err := b.client.Get("http://" + target + "/")
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return outcomeRefused
		case errors.As(err, &ne) && ne.Timeout():
			return outcomeTimeout
		case strings.Contains(err.Error(), "connection refused"):
			return outcomeRefused
		}
		return outcomeOther
	}
	_, _ = io.Copy(io.Discard, resp.Body) // so that the connection is kept for the next
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return outcomeStatus
	}
	return outcomeOK
}
