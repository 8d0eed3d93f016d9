package agent

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// pageSource is the agent as its web page reads it (page.Source): the restarts of the view
// cache, the fleets of the fleet runner's latest listing, and the hub's notifications. The
// page sees nothing else of the agent.
type pageSource struct{ a *Agent }

var _ page.Source = pageSource{}

func (s pageSource) Restarts(ctx context.Context) ([]*restart.Record, error) {
	return s.a.view.records(ctx)
}

// Restart reads the restart fresh from the store, in the agent's namespaces.
func (s pageSource) Restart(ctx context.Context, idOrPrefix string) (*restart.Record, error) {
	return s.a.cfg.Store.Find(ctx, s.a.cfg.Namespace, idOrPrefix)
}

func (s pageSource) Fleets() ([]*fleet.Record, error) {
	if s.a.fleets == nil {
		return nil, page.ErrNoFleets
	}
	return s.a.fleets.snapshot()
}

// Fleet reads the fleet fresh from the store, in the agent's namespaces.
func (s pageSource) Fleet(ctx context.Context, idOrPrefix string) (*fleet.Record, error) {
	if s.a.fleets == nil {
		return nil, page.ErrNoFleets
	}
	return s.a.fleets.fleets.Find(ctx, s.a.cfg.Namespace, idOrPrefix)
}

func (s pageSource) Next() <-chan struct{} {
	_, wake := s.a.page.next()
	return wake
}

func (s pageSource) Changed()                   { s.a.page.changed() }
func (s pageSource) Stale() (time.Time, string) { return s.a.page.stale() }
func (s pageSource) Stopped() <-chan struct{}   { return s.a.page.ended() }
func (s pageSource) Holder() string             { return s.a.cfg.Holder }
func (s pageSource) Now() time.Time             { return s.a.cfg.Now() }
