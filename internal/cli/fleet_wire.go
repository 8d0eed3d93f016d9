package cli

import (
	"errors"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// maxFleetFeeds caps the event streams one process holds for a fleet's children, whatever
// -max-parallel-jobs says: each is a long-lived connection to Nomad.
const maxFleetFeeds = 24

// fleetSession is what fleet commands need of a session beyond restarts': the fleet store,
// the jobs listing, and a fleet driver. Only a session on Nomad has them (fleets live in
// Nomad Variables).
type fleetSession interface {
	session
	fleetStore() store.Fleets
	jobLister() fleetrun.Lister
	// fleetDriver is a driver whose engine holds up to maxFeeds event streams at once and,
	// with driveChildren, drives the fleet's children in this process.
	fleetDriver(maxFeeds int, driveChildren bool) *fleetrun.Driver
}

// errNoFleets says the session cannot keep fleets (a test's fake session).
var errNoFleets = errors.New("fleet restarts need Nomad: this session has no Nomad Variables store")

// asFleetSession returns ses's fleet side, or errNoFleets.
func asFleetSession(ses session) (fleetSession, error) {
	fs, ok := ses.(fleetSession)
	if !ok {
		return nil, errNoFleets
	}
	return fs, nil
}

// fleetStore is the session's fleet store, on the store client as the restart store.
func (s *nomadSession) fleetStore() store.Fleets {
	s.fleetsOnce.Do(func() {
		c := s.storeClient
		if c == nil {
			c = s.client
		}
		s.fleets = store.NewNomadFleets(c, store.NomadOptions{})
	})
	return s.fleets
}

func (s *nomadSession) jobLister() fleetrun.Lister { return s.cluster }

func (s *nomadSession) fleetDriver(maxFeeds int, driveChildren bool) *fleetrun.Driver {
	restarts := s.nomadStore()
	if driveChildren {
		// The children's drivers follow their steering on one shared listing per namespace,
		// as the agent's do: a blocking read per child would hold a connection each, and
		// -max-parallel-jobs of them would starve the records' pool (and the fleet's lease
		// renewals with it).
		c := s.storeClient
		if c == nil {
			c = s.client
		}
		restarts = store.NewNomad(c, store.NomadOptions{Logger: s.logger, SharedWatch: true})
	}
	eng := engine.New(engine.Config{Cluster: s.cluster, Store: restarts, Logger: s.logger, Holder: s.holder,
		Health: s.health, MaxFeeds: min(max(maxFeeds, 1), maxFleetFeeds)})
	return fleetrun.New(fleetrun.Config{Fleets: s.fleetStore(), Restarts: restarts, Engine: eng,
		Holder: s.holder, Logger: s.logger, DriveChildren: driveChildren})
}
