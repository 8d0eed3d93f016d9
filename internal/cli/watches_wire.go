package cli

import (
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// jobCluster is the session's Nomad, for commands that read jobs only (watches).
func (s *nomadSession) jobCluster() *cluster.Nomad { return s.cluster }

// variablesClient is the session's api client, through which watches lists variables'
// metadata.
func (s *nomadSession) variablesClient() *api.Client { return s.client }
