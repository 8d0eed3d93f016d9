package httpapi

import (
	"context"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

// server is Nomad's HTTP API over a simulated cluster's state: its handlers read and change
// the state under the state's lock, as Nomad's endpoints run their RPCs.
type server struct {
	*sim.Cluster
	// life is the cluster's: a request's RPC ends with it, not with the request's client.
	life context.Context
}
