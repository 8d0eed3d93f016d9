package cli

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// newCountingClient builds the agent's Nomad client with the metrics' counting transport.
// The api module sets up TLS and unix sockets only on a client it builds itself, so this
// does both as it does: TLS on the transport, and a unix:// address (the task API socket a
// Nomad job gets with a workload identity) dialled by the transport.
// maxConns (0: cluster.MaxConnsPerHost) bounds its connections to Nomad; observe, when not
// nil, hears the time of each answer (cluster.ObserveDates).
func newCountingClient(conf *api.Config, m *agent.Metrics, maxConns int, observe func(time.Time)) (*api.Client, error) {
	tr := cluster.NewTransport()
	if maxConns > 0 {
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = maxConns, maxConns
	}
	if sock, ok := strings.CutPrefix(conf.Address, "unix://"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		conf.Address = "http://127.0.0.1"
	}
	conf.HttpClient = &http.Client{Transport: tr}
	if err := api.ConfigureTLS(conf.HttpClient, conf.TLSConfig); err != nil {
		return nil, err
	}
	conf.HttpClient.Transport = cluster.ObserveDates(m.Transport(tr), observe)
	return api.NewClient(conf)
}
