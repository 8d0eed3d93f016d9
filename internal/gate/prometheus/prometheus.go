// Package prometheus asks Prometheus's HTTP API (through the official client) the instant
// queries of the metric gates: a gate.Querier.
package prometheus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// Config is where Prometheus is and how to reach it.
type Config struct {
	// Address is Prometheus's base URL, http:// or https://, with a path prefix if it is
	// served under one (https://example.com/prometheus).
	Address string
	// BearerToken, or BearerTokenFile (read again for each query, so a rotated token is
	// picked up), is sent as "Authorization: Bearer ..."; give at most one.
	BearerToken     string
	BearerTokenFile string
	// CACert is a PEM file of the CAs to trust instead of the system's; ClientCert and
	// ClientKey are a PEM client certificate and its key, for mutual TLS.
	CACert, ClientCert, ClientKey string
	// InsecureSkipVerify accepts any server certificate: for tests only.
	InsecureSkipVerify bool
	// Timeout bounds one query, in Prometheus's engine and on the wire (-request-timeout;
	// see upstream.Guard); 0 is upstream.DefaultTimeout.
	Timeout time.Duration
}

// Client is a Querier on Prometheus's HTTP API (the official client).
type Client struct {
	address   string
	api       v1.API
	timeout   time.Duration
	transport *http.Transport
}

// New checks cfg and makes the client; it reads the TLS files and the token file
// now, so that a wrong path fails before any restart starts.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheus address %q: want an http:// or https:// URL, e.g. http://prometheus.service.consul:9090", cfg.Address)
	}
	if cfg.BearerToken != "" && cfg.BearerTokenFile != "" {
		return nil, errors.New("prometheus: give a bearer token or a bearer token file, not both")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("prometheus timeout %s: use a positive duration, or 0 for %s", cfg.Timeout, upstream.DefaultTimeout)
	}
	tlsConfig, err := cfg.tlsConfig(u.Scheme)
	if err != nil {
		return nil, err
	}
	if cfg.BearerTokenFile != "" {
		if _, err := readToken(cfg.BearerTokenFile); err != nil {
			return nil, err
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	var rt http.RoundTripper = transport
	if cfg.BearerToken != "" || cfg.BearerTokenFile != "" {
		rt = bearer{token: cfg.BearerToken, file: cfg.BearerTokenFile, next: transport}
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = upstream.DefaultTimeout
	}
	// The address in messages has any password of the URL's masked.
	address := strings.TrimRight(u.Redacted(), "/")
	rt = upstream.Guard(rt, upstream.Prometheus(address, timeout))
	client, err := api.NewClient(api.Config{Address: cfg.Address, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus address %q: %w", cfg.Address, err)
	}
	return &Client{address: address, api: v1.NewAPI(client), timeout: timeout, transport: transport}, nil
}

// tlsConfig is the TLS setup the config asks for, nil for the defaults.
func (cfg Config) tlsConfig(scheme string) (*tls.Config, error) {
	if cfg.CACert == "" && cfg.ClientCert == "" && cfg.ClientKey == "" && !cfg.InsecureSkipVerify {
		return nil, nil
	}
	if scheme != "https" {
		return nil, fmt.Errorf("prometheus address %q: the TLS options need an https:// address", cfg.Address)
	}
	c := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify}
	if cfg.CACert != "" {
		pem, err := os.ReadFile(cfg.CACert)
		if err != nil {
			return nil, fmt.Errorf("prometheus CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("prometheus CA certificate %s: no PEM certificate in it", cfg.CACert)
		}
		c.RootCAs = pool
	}
	if (cfg.ClientCert == "") != (cfg.ClientKey == "") {
		return nil, errors.New("prometheus client certificate: give both the certificate and its key")
	}
	if cfg.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("prometheus client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// bearer adds the Authorization header to each request.
type bearer struct {
	token, file string
	next        http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	token := b.token
	if b.file != "" {
		t, err := readToken(b.file)
		if err != nil {
			return nil, err
		}
		token = t
	}
	req = req.Clone(req.Context()) // a RoundTripper must not change the caller's request
	req.Header.Set("Authorization", "Bearer "+token)
	return b.next.RoundTrip(req)
}

func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("prometheus bearer token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("prometheus bearer token file %s is empty", file)
	}
	return t, nil
}

// Close lets go of idle connections.
func (p *Client) Close() { p.transport.CloseIdleConnections() }

// Query evaluates promql at the moment at (Prometheus's now when at is zero). A scalar or a
// vector of one sample is a value, an empty vector no data; more series, a range vector or
// a string is an error, since a gate compares one number.
//
// Prometheus is told to give the query up at the timeout; the client's guard waits that
// long and a moment for the answer, whose failure is then one line naming the address
// (upstream.NoAnswerError), as is an answer that is not Prometheus's (upstream.NotAPIError).
func (p *Client) Query(ctx context.Context, promql string, at time.Time) (gate.Sample, error) {
	ctx = upstream.Record(ctx)
	v, warnings, _, err := p.api.Query(ctx, promql, at, v1.WithTimeout(p.timeout))
	var apiErr *v1.Error
	switch {
	case err == nil && v == nil:
		// JSON without Prometheus's "data": another service's answer.
		err = upstream.NotTheAPI(ctx, errors.New(`no "data" in the answer`))
	case errors.As(err, &apiErr) && apiErr.Type == v1.ErrBadResponse && undecodable(apiErr.Msg):
		err = upstream.NotTheAPI(ctx, err)
	}
	if ue, ok := upstream.Find(err); ok {
		return gate.Sample{}, ue
	}
	if err != nil {
		return gate.Sample{}, fmt.Errorf("querying Prometheus at %s: %w%s", p.address, err, detail(err))
	}
	s, err := sampleOf(v)
	if err != nil {
		return gate.Sample{}, err
	}
	s.Warnings = warnings
	return s, nil
}

// undecodable reports whether a bad_response's message is encoding/json's, which the client
// passes on as text: the answer was not JSON of Prometheus's envelope. A result it does not
// know ("unexpected value type") is Prometheus's answer all the same.
func undecodable(msg string) bool {
	for _, p := range [...]string{"invalid character", "unexpected end of JSON input", "json: cannot unmarshal"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// maxDetail bounds how much of an unexpected answer's body an error quotes.
const maxDetail = 200

// detail is what the client's error leaves out: the body of an answer whose status code
// Prometheus's API does not use for its errors (a 503 on a timeout, a proxy's 401 or 502),
// which says what went wrong. Prometheus's own JSON error is reduced to its message.
func detail(err error) string {
	var apiErr *v1.Error
	if !errors.As(err, &apiErr) || strings.TrimSpace(apiErr.Detail) == "" {
		return ""
	}
	var body struct {
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
	}
	if json.Unmarshal([]byte(apiErr.Detail), &body) == nil && body.Error != "" {
		return fmt.Sprintf(" (%s: %s)", body.ErrorType, body.Error)
	}
	d := strings.Join(strings.Fields(apiErr.Detail), " ") // one line
	if r := []rune(d); len(r) > maxDetail {
		d = string(r[:maxDetail]) + "…"
	}
	return " (" + d + ")"
}

// maxSeriesNamed is how many series an error about too many series names.
const maxSeriesNamed = 3

// sampleOf reads the one number of a query's result.
func sampleOf(v model.Value) (gate.Sample, error) {
	switch v := v.(type) {
	case *model.Scalar:
		return gate.Sample{Value: float64(v.Value)}, nil
	case model.Vector:
		switch len(v) {
		case 0:
			return gate.Sample{Empty: true}, nil
		case 1:
			return gate.Sample{Value: float64(v[0].Value)}, nil
		}
		named := make([]string, 0, maxSeriesNamed+1)
		for _, s := range v[:min(len(v), maxSeriesNamed)] {
			named = append(named, s.Metric.String())
		}
		if len(v) > maxSeriesNamed {
			named = append(named, "…")
		}
		return gate.Sample{}, fmt.Errorf("query returned %d series, want 1: %s; aggregate it, e.g. sum(...)", len(v), strings.Join(named, ", "))
	case model.Matrix:
		return gate.Sample{}, errors.New("query returned a range vector, want one number: drop the [range] selector at the top or wrap it, e.g. rate(...[1m])")
	case nil:
		return gate.Sample{}, errors.New("query returned no result")
	}
	return gate.Sample{}, fmt.Errorf("query returned a %s, want one number", v.Type())
}

// Dialer makes the gates' Queriers on one configuration: the assembly (internal/cli) builds
// it from the flags and the environment and hands it to the engine, which asks for the
// Prometheus a restart recorded.
type Dialer struct {
	Config Config
}

// Address is the configured Prometheus's address ("" when none is), which planning records.
func (d Dialer) Address() string { return d.Config.Address }

// Dial returns a Querier on Prometheus at address (where the restart's planner reached
// it), else at the configured address.
func (d Dialer) Dial(address string) (gate.Querier, error) {
	cfg := d.Config
	if address != "" {
		cfg.Address = address
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}
