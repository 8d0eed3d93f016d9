package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// fleetTarget is a fleet found by ID, with the session it lives in.
type fleetTarget struct {
	ses fleetSession
	rec *fleet.Record
}

// findAny resolves an ID or unique prefix among restarts and fleets: the commands that
// take an ID (status, attach, pause, resume, cancel, answer) take either. A prefix that
// matches a restart and a fleet is ambiguous. Fleets live in Nomad only, so they are
// looked up only where Nomad's store is read.
func (a *app) findAny(ctx context.Context, ses session, stores []store.Store, o *idOptions, id string) (store.Store, *restart.Record, *fleetTarget, error) {
	st, rec, rerr := a.find(ctx, stores, o.namespace, id)
	fs, err := asFleetSession(ses)
	if err != nil || !hasKind(stores, "nomad") || ctx.Err() != nil {
		return st, rec, nil, rerr
	}
	frec, ferr := fs.fleetStore().Find(ctx, o.namespace, id)
	var ramb, famb *store.AmbiguousIDError
	restartsAmbiguous, fleetsAmbiguous := errors.As(rerr, &ramb), errors.As(ferr, &famb)
	switch {
	case ferr == nil && rerr == nil:
		return nil, nil, nil, usageErrorf("ID prefix %q matches restart %s and fleet %s; give more of the ID", id, shortID(rec.ID, false), shortID(frec.ID, false))
	case ferr == nil && restartsAmbiguous:
		return nil, nil, nil, usageErrorf("ID prefix %q matches fleet %s and %s; give more of the ID", id, shortID(frec.ID, false), plural(len(ramb.Matches), "restart", "restarts"))
	case ferr == nil:
		return nil, nil, &fleetTarget{ses: fs, rec: frec}, nil
	case fleetsAmbiguous && rerr == nil:
		return nil, nil, nil, usageErrorf("ID prefix %q matches restart %s and %s; give more of the ID", id, shortID(rec.ID, false), plural(len(famb.Matches), "fleet", "fleets"))
	case fleetsAmbiguous:
		return nil, nil, nil, famb
	case rerr == nil:
		return st, rec, nil, nil
	case restartsAmbiguous:
		return nil, nil, nil, rerr
	case errors.Is(ferr, store.ErrFleetNotFound):
		return nil, nil, nil, errors.New(strings.Replace(rerr.Error(), "no restart matches", "no restart or fleet matches", 1))
	}
	return nil, nil, nil, fmt.Errorf("%s; and the fleets could not be read: %s", rerr.Error(), fleetStoreErrorText(ferr))
}
