package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// ClientConfig holds Nomad's client options as the CLI flags give them. Empty fields (and
// a false Insecure) leave the value from the environment (NOMAD_ADDR, NOMAD_REGION,
// NOMAD_NAMESPACE, NOMAD_TOKEN, NOMAD_CACERT, NOMAD_CAPATH, NOMAD_CLIENT_CERT,
// NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME, NOMAD_SKIP_VERIFY) or the default.
type ClientConfig struct {
	Address       string
	Region        string
	Namespace     string
	Token         string
	CACert        string
	CAPath        string
	ClientCert    string
	ClientKey     string
	TLSServerName string
	Insecure      bool
	// MaxConns bounds the connections the client opens to Nomad; zero: MaxConnsPerHost.
	MaxConns int
	// ObserveTime, when set, hears the time of each of Nomad's answers (its Date header),
	// to estimate Nomad's clock (see ObserveDates).
	ObserveTime func(time.Time)
	// RequestTimeout bounds the wait for each of Nomad's answers (-request-timeout; see
	// upstream.Guard); zero: upstream.DefaultTimeout.
	RequestTimeout time.Duration
}

// APIConfig layers cfg over api.DefaultConfig() exactly as Nomad's Meta.clientConfig does:
// flags override the environment, which overrides the defaults.
func (cfg ClientConfig) APIConfig() *api.Config {
	c := api.DefaultConfig()
	c.Address = cmp.Or(cfg.Address, c.Address)
	c.Region = cmp.Or(cfg.Region, c.Region)
	c.Namespace = cmp.Or(cfg.Namespace, c.Namespace)
	c.SecretID = cmp.Or(cfg.Token, c.SecretID)
	tls := c.TLSConfig
	tls.CACert = cmp.Or(cfg.CACert, tls.CACert)
	tls.CAPath = cmp.Or(cfg.CAPath, tls.CAPath)
	tls.ClientCert = cmp.Or(cfg.ClientCert, tls.ClientCert)
	tls.ClientKey = cmp.Or(cfg.ClientKey, tls.ClientKey)
	tls.TLSServerName = cmp.Or(cfg.TLSServerName, tls.TLSServerName)
	tls.Insecure = cfg.Insecure || tls.Insecure
	return c
}

// NewClient builds an official api client from Nomad's client options and environment,
// every request of which is bounded by cfg.RequestTimeout (Guard).
func NewClient(cfg ClientConfig) (*api.Client, error) {
	conf := cfg.APIConfig()
	tr := NewTransport()
	if cfg.MaxConns > 0 {
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = cfg.MaxConns, cfg.MaxConns
	}
	if sock, ok := strings.CutPrefix(conf.Address, "unix://"); ok {
		// The task API socket a job gets with a workload identity. The api module sends
		// a unix:// address's requests to http://127.0.0.1 through whatever client it is
		// given; this transport dials the socket.
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	}
	conf.HttpClient = &http.Client{Transport: tr}
	if err := api.ConfigureTLS(conf.HttpClient, conf.TLSConfig); err != nil {
		return nil, fmt.Errorf("configuring TLS for Nomad at %s: %w", conf.Address, err)
	}
	conf.HttpClient.Transport = Guard(ObserveDates(conf.HttpClient.Transport, cfg.ObserveTime), conf.Address, cfg.RequestTimeout)
	c, err := api.NewClient(conf)
	if err != nil {
		return nil, fmt.Errorf("configuring the Nomad client for %s: %w", conf.Address, err)
	}
	return c, nil
}

// Guard bounds each request of next to Nomad at address (upstream.Guard): an answer within
// timeout (zero: upstream.DefaultTimeout), a blocking query's within its wait and Nomad's
// jitter and timeout, the event stream's heartbeats; and refuses answers that are not
// Nomad's API. Every Nomad client of the process is built on it.
func Guard(next http.RoundTripper, address string, timeout time.Duration) http.RoundTripper {
	return upstream.Guard(next, upstream.Nomad(address, timeout))
}

// MaxIdleConnsPerHost is how many idle connections to Nomad a client keeps: all it may
// open. A driver sends a whole batch's requests at once; the api module's default pool
// (GOMAXPROCS+1 idle connections) would close most of them after each burst and dial
// (with TLS: handshake) them again for the next.
const MaxIdleConnsPerHost = MaxConnsPerHost

// MaxConnsPerHost bounds the connections a process opens to one Nomad address; requests
// past it wait for a free one. Nomad refuses a client address more than
// limits.http_max_conns_per_client (100 by default) with 429, which a driver sending a
// batch of 100 restart requests at once passed on a real agent. Blocking queries are
// bounded separately (DefaultMaxBlocking), so that they never take every connection.
const MaxConnsPerHost = 64

// StoreMaxConns bounds the connections of the client that keeps restart records (its
// writes, its record watch, its lease renewals): a pool of its own, so that a renewal never
// waits behind a batch's requests (a restart request lasts as long as the task takes to
// stop), and small, so that with MaxConnsPerHost the process stays under Nomad's 100.
const StoreMaxConns = 16

// NewTransport is the api module's HTTP transport (cleanhttp's pooled one, HTTP/1.1, TLS
// 1.2 at least) with a pool sized for a driver's bursts. TLS is set up on it by
// api.ConfigureTLS.
func NewTransport() *http.Transport {
	tr := cleanhttp.DefaultPooledTransport()
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	// HTTP/1.1 as the api module does: its exec and websocket calls need it.
	tr.ForceAttemptHTTP2 = false
	tr.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	tr.MaxConnsPerHost = MaxConnsPerHost
	return tr
}

// ErrUnreachable is matched (errors.Is) by Reachable's error when no agent answered.
var ErrUnreachable = errors.New("cannot reach Nomad")

// Reachable checks that a Nomad agent answers at the client's address, with one request to
// /v1/status/leader (which needs no ACL permission). A transport failure gives one line:
// `cannot reach Nomad at <addr>: <cause>; set -address or NOMAD_ADDR`. An agent that
// answers with an error (no cluster leader, a proxy's refusal) is reported as such; no
// answer in time, or one that is not Nomad's API, as upstream's one line says it.
func Reachable(ctx context.Context, client *api.Client) error {
	var leader string
	rctx := upstream.Record(ctx)
	_, err := client.Raw().Query("/v1/status/leader", &leader, (&api.QueryOptions{}).WithContext(rctx))
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("checking Nomad at %s: %w", client.Address(), ctx.Err())
	}
	if ue, ok := upstream.Find(upstream.Explain(rctx, err)); ok {
		return ue
	}
	if code := statusCode(err); code != 0 {
		return fmt.Errorf("Nomad at %s answered %d: %s", client.Address(), code, firstNonEmpty(responseBody(err), err.Error()))
	}
	return fmt.Errorf("%w at %s: %v; set -address or NOMAD_ADDR", ErrUnreachable, client.Address(), err)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
