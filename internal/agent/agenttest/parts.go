package agenttest

import (
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
)

// Parts are what the command hands an agent on one Nomad client (internal/cli's nomad.go):
// the cluster, which lists the jobs too, the restarts' and fleets' records in Nomad
// Variables, the discovery of restarts, the schedules, and the client's address. The tests
// copy them into agent.Config themselves, since agenttest does not import the agent.
type Parts struct {
	Cluster   *cluster.Nomad
	Store     *nomadstore.Restarts
	Discovery *nomadstore.Lister
	Fleets    *nomadstore.Fleets
	Schedules *schedule.Store
	Address   string
}

// NomadParts is the Parts on client.
func NomadParts(client *api.Client) Parts {
	vars := nomadvars.New(client, nomadvars.Options{})
	return Parts{
		Cluster: cluster.NewNomad(client), Store: nomadstore.NewRestarts(vars, nomadstore.Options{}),
		Discovery: nomadstore.NewLister(vars, ""), Fleets: nomadstore.NewFleets(vars, nomadstore.Options{}),
		Schedules: schedule.NewStore(vars, ""), Address: client.Address(),
	}
}

// Drivers builds the engine of c and the fleet driver of fleets on it, whose children are
// the engine's restarts, as the command builds them: same holder, logger and clock.
func Drivers(c engine.Config, fleets store.Fleets) (*engine.Engine, *fleetrun.Driver) {
	eng := engine.New(c)
	return eng, fleetrun.New(fleetrun.Config{Fleets: fleets, Restarts: c.Store, Engine: eng, Holder: c.Holder, Logger: c.Logger, Now: c.Now})
}
