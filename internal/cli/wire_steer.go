package cli

import (
	"context"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

func (a engineAdapter) Drive(ctx context.Context, namespace, id string, sink func(restart.Event)) (*restart.Record, error) {
	return a.e.Drive(ctx, namespace, id, sink)
}

func (a engineAdapter) Pause(ctx context.Context, namespace, id, by string) (*restart.Record, error) {
	return a.e.Pause(ctx, namespace, id, by)
}

func (a engineAdapter) Resume(ctx context.Context, namespace, id, by string) (*restart.Record, error) {
	return a.e.Resume(ctx, namespace, id, by)
}

func (a engineAdapter) Cancel(ctx context.Context, namespace, id, by string) (*restart.Record, error) {
	return a.e.Cancel(ctx, namespace, id, by)
}

func (a engineAdapter) Answer(ctx context.Context, namespace, id, answer, by string) (*restart.Record, error) {
	return a.e.Answer(ctx, namespace, id, answer, by)
}

// nomadStore is the Nomad Variables store of this session (built once), on the session's
// store client.
func (s *nomadSession) nomadStore() store.Store {
	s.nomadOnce.Do(func() {
		c := s.storeClient
		if c == nil {
			c = s.client
		}
		s.nomad = store.NewNomad(c, store.NomadOptions{})
	})
	return s.nomad
}

func (s *nomadSession) probeNomad(ctx context.Context, namespace, job string) error {
	return store.ProbeNomad(ctx, s.client, namespace, job)
}
