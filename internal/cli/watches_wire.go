package cli

import "github.com/nomad-restart/nomad-restart/internal/cluster"

// jobCluster is the session's Nomad, for commands that read jobs only (watches).
func (s *nomadSession) jobCluster() *cluster.Nomad { return s.cluster }
