package cli

import (
	"context"
	"errors"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// engineAdapter maps the engine's API onto the commands' restarter.
type engineAdapter struct{ e *engine.Engine }

func (a engineAdapter) Plan(ctx context.Context, namespace, job string, spec restart.Spec) (*planned, error) {
	p, err := a.e.Plan(ctx, engine.Request{Namespace: namespace, Job: job, Spec: spec})
	if err != nil {
		return nil, err
	}
	// -surge refusals (job type, scaling policy) come before anything is recorded.
	if err := a.e.CheckSurge(ctx, p); err != nil {
		return nil, err
	}
	// The gates' queries are asked once now: a typo, or a Prometheus that does not answer,
	// is caught before anything restarts.
	measured, err := a.e.MeasureGates(ctx, p.Record)
	if err != nil {
		return nil, err
	}
	return &planned{Record: p.Record, Job: p.Job, Skipped: p.Skipped, Gates: measured, Warnings: p.Warnings}, nil
}

func (a engineAdapter) Create(ctx context.Context, rec *restart.Record) error {
	return a.e.Create(ctx, rec)
}

func (a engineAdapter) CreateHeld(ctx context.Context, rec *restart.Record) (held, error) {
	h, err := a.e.CreateHeld(ctx, rec)
	if err != nil {
		return nil, err
	}
	return heldAdapter{e: a.e, h: h}, nil
}

// heldAdapter maps the engine's held restart onto the commands' held.
type heldAdapter struct {
	e *engine.Engine
	h *engine.Held
}

func (a heldAdapter) Drive(ctx context.Context, sink func(restart.Event)) (*restart.Record, error) {
	return a.e.DriveHeld(ctx, a.h, sink)
}

// errNoFleets says the session cannot keep fleets (a test's fake session).
var errNoFleets = errors.New("fleet restarts need Nomad: this session has no Nomad Variables store")

// fleetsOf is ses when it keeps fleets, else errNoFleets.
func fleetsOf(ses session) (session, error) {
	if ses.fleetStore() == nil {
		return nil, errNoFleets
	}
	return ses, nil
}

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
