package restart

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
)

// EvidenceKind names where a drain sees that a load balancer stopped sending to an
// instance (-drain-until).
type EvidenceKind string

// The kinds of evidence a drain can wait for.
const (
	// EvidenceTraefik: Traefik's API (/api/http/services) no longer lists the instance's
	// address among the servers of any service's load balancer.
	EvidenceTraefik EvidenceKind = "traefik"
	// EvidenceHAProxy: HAProxy's statistics (the CSV of the stats page, or `show stat` on
	// its runtime API) show the instance's server in maintenance or drain, or not at all.
	EvidenceHAProxy EvidenceKind = "haproxy"
	// EvidenceEnvoy: Envoy's admin /clusters no longer lists the instance's address as a
	// healthy host.
	EvidenceEnvoy EvidenceKind = "envoy"
	// EvidencePrometheus: a PromQL query, templated with the instance, returns a series
	// (as an alerting rule fires), e.g. its request rate compared to 0.
	EvidencePrometheus EvidenceKind = "prometheus"
)

// DrainEvidence is one -drain-until: where to see that the balancer dropped the instance.
type DrainEvidence struct {
	Kind EvidenceKind `json:"kind"`
	// Address is the balancer's API: an http(s) URL; for HAProxy also its runtime API's
	// socket, unix:/path or tcp://host:port. Empty for Prometheus (the configured one).
	Address string `json:"address,omitempty"`
	// Query is Prometheus's PromQL, its template variables still in it (QueryFor).
	Query string `json:"query,omitempty"`
}

// String is the evidence in -drain-until's form, which ParseDrainUntil reads back.
func (e DrainEvidence) String() string {
	if e.Kind == EvidencePrometheus {
		return string(EvidencePrometheus) + ":" + e.Query
	}
	return string(e.Kind) + "=" + e.Address
}

// Name is how messages name the balancer: "Traefik at http://traefik:8080".
func (e DrainEvidence) Name() string {
	switch e.Kind {
	case EvidenceTraefik:
		return "Traefik at " + e.Address
	case EvidenceHAProxy:
		return "HAProxy at " + e.Address
	case EvidenceEnvoy:
		return "Envoy at " + e.Address
	}
	return "the Prometheus query " + strconv.Quote(e.Query)
}

// DrainTarget is one drained instance, as a drain's evidence looks for it.
type DrainTarget struct {
	// Address is the instance's address and port as the balancer knows it (10.0.0.5:8080).
	Address                                     string
	AllocID, AllocName, Service, Job, Namespace string
}

// drainQueryVarList names the variables of a prometheus: evidence's query.
const drainQueryVarList = "{{address}} {{host}} {{port}} {{alloc}} {{alloc_name}} {{service}} {{job}} {{namespace}}"

// QueryFor is the evidence's PromQL for the instance t: each variable's value is escaped
// for the inside of a double-quoted PromQL string (instance="{{address}}").
func (e DrainEvidence) QueryFor(t DrainTarget) string {
	out, _ := gate.Expand(e.Query, drainQueryVars(t), drainQueryVarList)
	return out
}

func drainQueryVars(t DrainTarget) map[string]string {
	host, port := t.Address, ""
	if i := strings.LastIndexByte(t.Address, ':'); i >= 0 {
		host, port = t.Address[:i], t.Address[i+1:]
	}
	vars := map[string]string{"address": t.Address, "host": host, "port": port, "alloc": t.AllocID,
		"alloc_name": t.AllocName, "service": t.Service, "job": t.Job, "namespace": t.Namespace}
	for k, v := range vars {
		q := strconv.Quote(v)
		vars[k] = q[1 : len(q)-1]
	}
	return vars
}

// drainUntilForms is what -drain-until takes, for its refusals.
const drainUntilForms = "give traefik=http://HOST:8080, haproxy=http://HOST:PORT/STATS-URI (or haproxy=unix:/PATH of its runtime API), envoy=http://127.0.0.1:19000, or prometheus:QUERY"

// ParseDrainUntil parses one -drain-until: KIND=ADDRESS for Traefik, HAProxy and Envoy, or
// prometheus:QUERY. Addresses are checked for their form here; whether the balancer
// answers is checked when the restart is planned.
func ParseDrainUntil(s string) (DrainEvidence, error) {
	fail := func(reason string) (DrainEvidence, error) {
		return DrainEvidence{}, &ValueError{Flag: "drain-until", Value: s, Reason: reason}
	}
	v := strings.TrimSpace(s)
	if v == "" {
		return fail("it is empty; " + drainUntilForms)
	}
	if q, ok := strings.CutPrefix(v, string(EvidencePrometheus)+":"); ok {
		q = strings.TrimSpace(q)
		if q == "" {
			return fail(`the query is empty; give prometheus:QUERY, a query that returns a series once the balancer stopped sending to the instance, such as prometheus:sum(rate(requests_total{instance="{{address}}"}[15s])) == 0`)
		}
		if _, err := gate.Expand(q, drainQueryVars(DrainTarget{}), drainQueryVarList); err != nil {
			return fail(err.Error())
		}
		return DrainEvidence{Kind: EvidencePrometheus, Query: q}, nil
	}
	kind, addr, ok := strings.Cut(v, "=")
	k := EvidenceKind(strings.ToLower(strings.TrimSpace(kind)))
	if !ok || !slices.Contains([]EvidenceKind{EvidenceTraefik, EvidenceHAProxy, EvidenceEnvoy}, k) {
		return fail("unknown balancer; " + drainUntilForms)
	}
	addr = strings.TrimSpace(addr)
	if reason := addressProblem(k, addr); reason != "" {
		return fail(reason)
	}
	return DrainEvidence{Kind: k, Address: addr}, nil
}

// addressProblem says what is wrong with a balancer's address, "" when nothing is. It reads
// the form only (the domain does no I/O and parses no URL beyond this).
func addressProblem(k EvidenceKind, addr string) string {
	scheme, rest, ok := strings.Cut(addr, ":")
	scheme = strings.ToLower(scheme)
	switch {
	case addr == "":
		return fmt.Sprintf("no address after %s=; %s", k, drainUntilForms)
	case strings.ContainsAny(addr, " \t\n\r"):
		return "the address has white space in it; " + drainUntilForms
	case ok && (scheme == "http" || scheme == "https") && hostOf(rest) != "":
		return ""
	case ok && k == EvidenceHAProxy && scheme == "unix" && strings.HasPrefix(strings.TrimPrefix(rest, "//"), "/"):
		return ""
	case ok && k == EvidenceHAProxy && scheme == "tcp" && strings.Contains(hostOf(rest), ":"):
		return ""
	}
	if k == EvidenceHAProxy {
		return "give the URL of HAProxy's stats page (http://HOST:PORT/STATS-URI), or its runtime API's socket as unix:/PATH or tcp://HOST:PORT"
	}
	return fmt.Sprintf("give the URL of %s's API, http://HOST:PORT", k)
}

// hostOf is the host (and port) of the part of a URL after "scheme:", "" when it has none.
func hostOf(rest string) string {
	after, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return ""
	}
	host, _, _ := strings.Cut(after, "/")
	return host
}

// TaggedBalancer is a load balancer that a service's tags name, and how often it reads
// Consul by its documented defaults (docs/requests.md cites them).
type TaggedBalancer struct {
	// Key is its name in -balancer-refresh and job meta: "traefik", "fabio".
	Key string
	// Name and Settings are for the plan: "Traefik", "Consul Catalog provider's
	// refreshInterval 15s + providersThrottleDuration 2s".
	Name, Settings string
	// Refresh is how long after a change it may read Consul; Throttle how long it may hold
	// a new configuration back after a reload.
	Refresh, Throttle time.Duration
	// RefreshGiven says Refresh is the operator's (-balancer-refresh), not the default.
	RefreshGiven bool
}

// Drain is how long a drain must last for the balancer to have left the instance: its
// refresh and throttle, and at least DefaultDrain.
func (b TaggedBalancer) Drain() time.Duration { return max(b.Refresh+b.Throttle, DefaultDrain) }

// String is the plan's words for it: "Traefik (Consul Catalog provider's refreshInterval
// 15s + providersThrottleDuration 2s)".
func (b TaggedBalancer) String() string {
	if b.RefreshGiven {
		return fmt.Sprintf("%s (refreshes every %s as configured, + %s throttle)", b.Name, b.Refresh, b.Throttle)
	}
	return fmt.Sprintf("%s (%s)", b.Name, b.Settings)
}

// Balancer keys, for -balancer-refresh and the tags that name them.
const (
	BalancerTraefik = "traefik"
	BalancerFabio   = "fabio"
)

// balancerKeys lists the balancers known by their tags.
func balancerKeys() []string { return []string{BalancerTraefik, BalancerFabio} }

// knownBalancer is the balancer key's documented defaults.
func knownBalancer(key string) TaggedBalancer {
	if key == BalancerFabio {
		// Fabio follows Consul with blocking queries (registry.consul.pollinterval 0): it
		// sees a change as soon as Consul answers; DefaultDrain covers the rebuild.
		return TaggedBalancer{Key: BalancerFabio, Name: "Fabio", Settings: "registry.consul.pollinterval 0: Consul's blocking queries"}
	}
	return TaggedBalancer{Key: BalancerTraefik, Name: "Traefik", Settings: "Consul Catalog provider's refreshInterval 15s + providersThrottleDuration 2s",
		Refresh: 15 * time.Second, Throttle: 2 * time.Second}
}

// BalancerOfTags is the balancer a Consul service's tags name: Traefik's Consul Catalog
// provider reads tags under its prefix "traefik." (traefik.enable=true,
// traefik.http.routers...), Fabio routes a service by its "urlprefix-" tags. refresh holds
// the operator's refresh per balancer key (-balancer-refresh), which replaces the default.
func BalancerOfTags(tags []string, refresh map[string]time.Duration) (TaggedBalancer, bool) {
	for _, key := range balancerKeys() {
		prefix := "traefik."
		if key == BalancerFabio {
			prefix = "urlprefix-"
		}
		if !slices.ContainsFunc(tags, func(t string) bool { return strings.HasPrefix(strings.TrimSpace(t), prefix) }) {
			continue
		}
		b := knownBalancer(key)
		if d, ok := refresh[key]; ok {
			b.Refresh, b.RefreshGiven = d, true
		}
		return b, true
	}
	return TaggedBalancer{}, false
}

// ParseBalancerRefresh parses one -balancer-refresh: NAME=DURATION, how often the named
// balancer reads Consul where it differs from its documented default ("our Traefik
// refreshes every 5s": traefik=5s).
func ParseBalancerRefresh(s string) (key string, d time.Duration, err error) {
	fail := func(reason string) (string, time.Duration, error) {
		return "", 0, &ValueError{Flag: "balancer-refresh", Value: s, Reason: reason}
	}
	name, text, ok := strings.Cut(strings.TrimSpace(s), "=")
	key = strings.ToLower(strings.TrimSpace(name))
	if !ok || !slices.Contains(balancerKeys(), key) {
		return fail(fmt.Sprintf("give NAME=DURATION with NAME one of %s, such as traefik=5s", strings.Join(balancerKeys(), ", ")))
	}
	d, perr := time.ParseDuration(strings.TrimSpace(text))
	if perr != nil || d < 0 || d > MaxDrain {
		return fail(fmt.Sprintf("give a duration from 0 to %s after %s=, such as %s=5s", MaxDrain, key, key))
	}
	return key, d, nil
}

// EvidenceDrainBound bounds a drain that waits for evidence (-drain-until) under -drain
// auto when the service's tags name no balancer: the drain ends with the evidence, so the
// bound costs only when a balancer never drops the instance.
const EvidenceDrainBound = 30 * time.Second

// SplitOptionLines splits a value that lists several values of a repeatable option, one a
// line (a job's meta nomad-restart.drain-until, the page form's text areas); blank lines
// are dropped. A value of blank lines only is one value given empty, for the option's
// parser to refuse as such, as run refuses -drain-until "".
func SplitOptionLines(value string) []string {
	var out []string
	for _, line := range strings.Split(value, "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return []string{value}
	}
	return out
}

// DrainText says how long the planned drain lasts and why, for the plan, the page and the
// drain's events: "for 17s, the refresh of Traefik (...) that the services' tags name",
// or "until Traefik at http://traefik:8080 no longer sends to it, at most 17s".
func (s Spec) DrainText() string {
	var b strings.Builder
	if len(s.DrainUntil) == 0 {
		b.WriteString("for " + s.Drain.String())
	} else {
		names := make([]string, len(s.DrainUntil))
		for i, ev := range s.DrainUntil {
			names[i] = ev.Name()
		}
		verb := "sends"
		if len(names) > 1 {
			verb = "send"
		}
		fmt.Fprintf(&b, "until %s no longer %s to it, at most %s", strings.Join(names, " and "), verb, s.Drain)
	}
	if s.DrainBalancer != "" {
		fmt.Fprintf(&b, " (the services' tags name %s)", s.DrainBalancer)
	}
	return b.String()
}
