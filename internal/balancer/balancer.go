// Package balancer reads load balancers for a drain's evidence (-drain-until): whether
// Traefik, HAProxy or Envoy still sends requests to an instance, or whether a Prometheus
// query about the instance holds. The engine is handed a Dialer, built by the command line
// from its flags, and asks each Probe every 250 ms while an instance drains.
package balancer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// Probe reads one balancer.
type Probe interface {
	// Check reads the balancer once, for the planner to refuse one that does not answer
	// before anything restarts.
	Check(ctx context.Context) error
	// Routes reports whether the balancer may still send requests to the instance.
	Routes(ctx context.Context, t restart.DrainTarget) (bool, error)
}

// PrometheusDialer gives the Querier of a prometheus: evidence (gate/prometheus.Dialer).
type PrometheusDialer interface {
	Address() string
	Dial(address string) (gate.Querier, error)
}

// Dialer makes the probes of a restart's -drain-until.
type Dialer struct {
	// Timeout bounds each read of a balancer (-request-timeout); zero: upstream's default.
	Timeout time.Duration
	// Transport is the HTTP transport under the timeouts; nil: http.DefaultTransport.
	Transport http.RoundTripper
	// Prometheus answers prometheus: evidence; nil: none configured.
	Prometheus PrometheusDialer
}

// Dial returns the probe of one evidence.
func (d Dialer) Dial(ev restart.DrainEvidence) (Probe, error) {
	switch ev.Kind {
	case restart.EvidencePrometheus:
		if d.Prometheus == nil || d.Prometheus.Address() == "" {
			return nil, errors.New("-drain-until prometheus: needs Prometheus: give -prometheus-address (or NOMAD_RESTART_PROMETHEUS_ADDR)")
		}
		q, err := d.Prometheus.Dial("")
		if err != nil {
			return nil, err
		}
		return &queryProbe{ev: ev, querier: q}, nil
	case restart.EvidenceHAProxy:
		if strings.HasPrefix(ev.Address, "unix:") || strings.HasPrefix(ev.Address, "tcp:") {
			return haproxySocket(ev.Address, d.timeout())
		}
		return &haproxyStats{get: d.getter(ev, "HAProxy"), url: statsCSV(ev.Address)}, nil
	case restart.EvidenceTraefik:
		return &traefik{get: d.getter(ev, "Traefik"), url: strings.TrimRight(ev.Address, "/") + "/api/http/services"}, nil
	case restart.EvidenceEnvoy:
		return &envoy{get: d.getter(ev, "Envoy"), url: strings.TrimRight(ev.Address, "/") + "/clusters"}, nil
	}
	return nil, fmt.Errorf("unknown -drain-until balancer %q", ev.Kind)
}

func (d Dialer) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return upstream.DefaultTimeout
}

// getter reads a balancer's HTTP API, bounded by the request timeout.
func (d Dialer) getter(ev restart.DrainEvidence, service string) getFunc {
	raw := ev.Kind != restart.EvidenceTraefik // HAProxy's CSV and Envoy's text are not JSON
	client := &http.Client{Transport: upstream.Guard(d.Transport, upstream.Target{Service: service, Address: ev.Address,
		Setting: "-drain-until", Timeout: d.timeout(), Raw: func(*http.Request) bool { return raw }})}
	return func(ctx context.Context, u string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("reading %s at %s: %w", service, u, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("reading %s at %s: %w", service, u, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if err != nil {
			return nil, fmt.Errorf("reading %s's answer at %s: %w", service, u, err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s at %s answered %s: %s", service, u, resp.Status, firstLine(string(body)))
		}
		return body, nil
	}
}

// maxAnswer bounds what is read of one answer: a balancer's listing of thousands of
// services stays well under it.
const maxAnswer = 64 << 20

type getFunc func(ctx context.Context, url string) ([]byte, error)

// statsCSV is the CSV form of HAProxy's stats page: its URI followed by ";csv".
func statsCSV(address string) string {
	u, err := url.Parse(address)
	if err != nil || strings.HasSuffix(u.Path, ";csv") {
		return address
	}
	u.Path += ";csv"
	return u.String()
}

// queryProbe is prometheus: evidence: the query holds (returns a series) once the
// balancer stopped sending to the instance.
type queryProbe struct {
	ev      restart.DrainEvidence
	querier gate.Querier
}

func (p *queryProbe) Check(ctx context.Context) error {
	_, err := p.querier.Query(ctx, p.ev.QueryFor(restart.DrainTarget{}), time.Now())
	return err
}

func (p *queryProbe) Routes(ctx context.Context, t restart.DrainTarget) (bool, error) {
	s, err := p.querier.Query(ctx, p.ev.QueryFor(t), time.Now())
	if err != nil {
		return true, err
	}
	return s.Empty, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
