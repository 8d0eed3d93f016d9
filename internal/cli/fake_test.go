package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
)

// The fakes below stand in for the engine so that the view (prompts, answers from another
// terminal, detach) is tested on its own; the end-to-end tests use the real engine on
// nomadsim.

type fakeBackend struct{ ses *fakeSession }

func (b fakeBackend) open(clientFlags, *slog.Logger, string) (session, error) { return b.ses, nil }

type fakeSession struct {
	st    store.Store
	drive func(ctx context.Context, f *fakeEngine, ns, id string, sink func(restart.Event)) (*restart.Record, error)
}

func (s *fakeSession) address() string                 { return "http://fake" }
func (s *fakeSession) reachable(context.Context) error { return nil }
func (s *fakeSession) probeNomad(context.Context, string, string) error {
	return errors.New("no Nomad store in this test")
}
func (s *fakeSession) nomadStore() store.Store          { return nil }
func (s *fakeSession) localStore() (store.Store, error) { return s.st, nil }
func (s *fakeSession) engine(st store.Store) restarter  { return &fakeEngine{st: st, ses: s} }

// The fake session keeps no fleets and no schedules: they live in Nomad Variables.
func (s *fakeSession) fleetStore() store.Fleets               { return nil }
func (s *fakeSession) jobLister() fleetrun.Lister             { return nil }
func (s *fakeSession) schedules() *schedule.Store             { return nil }
func (s *fakeSession) fleetDriver(int, bool) *fleetrun.Driver { return nil }

// The fake notifies nothing: notifications are tested on nomadsim.
func (s *fakeSession) notifySinks(context.Context, notifySetup) (map[string]deliver.Sink, error) {
	return nil, nil
}
func (s *fakeSession) startOutbox(context.Context, notifySetup, map[string]deliver.Sink, store.Store) *deliver.Outbox {
	return nil
}

// The fake has no Nomad: the commands that read jobs say so.
func (s *fakeSession) jobCluster() *cluster.Nomad                     { return nil }
func (s *fakeSession) sourceHub(sourcewatch.Options) *sourcewatch.Hub { return nil }

type fakeEngine struct {
	st  store.Store
	ses *fakeSession
}

func (f *fakeEngine) Plan(_ context.Context, ns, job string, spec restart.Spec) (*planned, error) {
	rec := &restart.Record{
		ID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", time.Now().UnixNano()&0xffffffff), Namespace: "default", JobID: job, Spec: spec,
		Status: restart.StatusPending, Batches: 2, Control: restart.Control{Intent: restart.IntentRun}, CreateTime: time.Now(),
		Allocs: []restart.AllocProgress{
			{ID: "aaaaaaaa-0000-4000-8000-000000000001", Name: job + ".web[0]", Group: "web", Batch: 1, State: restart.AllocPending},
			{ID: "aaaaaaaa-0000-4000-8000-000000000002", Name: job + ".web[1]", Group: "web", Batch: 2, State: restart.AllocPending},
		},
	}
	return &planned{Record: rec, Job: &restart.Job{ID: job, Namespace: "default"}}, nil
}

func (f *fakeEngine) Create(ctx context.Context, rec *restart.Record) error {
	rec.AppendEvent(restart.Event{Time: time.Now(), Type: restart.EventCreated, Message: "created"})
	return f.st.Create(ctx, rec)
}

// CreateHeld is Create: the fake drives take no lease.
func (f *fakeEngine) CreateHeld(ctx context.Context, rec *restart.Record) (held, error) {
	if err := f.Create(ctx, rec); err != nil {
		return nil, err
	}
	return fakeHeld{f: f, ns: rec.Namespace, id: rec.ID}, nil
}

type fakeHeld struct {
	f      *fakeEngine
	ns, id string
}

func (h fakeHeld) Drive(ctx context.Context, sink func(restart.Event)) (*restart.Record, error) {
	return h.f.Drive(ctx, h.ns, h.id, sink)
}

func (f *fakeEngine) Drive(ctx context.Context, ns, id string, sink func(restart.Event)) (*restart.Record, error) {
	return f.ses.drive(ctx, f, ns, id, sink)
}

// emit persists an event (and a change) and hands it to the sink, as the engine does.
func (f *fakeEngine) emit(ctx context.Context, ns, id string, sink func(restart.Event), ev restart.Event, change func(*restart.Record)) (*restart.Record, error) {
	var stored restart.Event
	rec, err := store.Mutate(ctx, f.st, ns, id, func(r *restart.Record) error {
		if change != nil {
			change(r)
		}
		ev.Time = time.Now()
		stored = r.AppendEvent(ev)
		return nil
	})
	if err == nil && sink != nil {
		sink(stored)
	}
	return rec, err
}

// waitAnswer waits for Control to answer question qid.
func (f *fakeEngine) waitAnswer(ctx context.Context, ns, id, qid string) (*restart.Record, error) {
	rec, err := f.st.Get(ctx, ns, id)
	for err == nil && rec.Control.AnswerTo != qid {
		rec, err = f.st.Watch(ctx, ns, id, rec.ModifyIndex)
	}
	return rec, err
}

func (f *fakeEngine) setIntent(ctx context.Context, ns, id, by string, in restart.Intent) (*restart.Record, error) {
	return store.Mutate(ctx, f.st, ns, id, func(r *restart.Record) error {
		r.Control.Intent, r.Control.By = in, by
		if in == restart.IntentCancel && r.Status == restart.StatusPending {
			r.Status = restart.StatusCanceled
		}
		return nil
	})
}

func (f *fakeEngine) Pause(ctx context.Context, ns, id, by string) (*restart.Record, error) {
	return f.setIntent(ctx, ns, id, by, restart.IntentPause)
}
func (f *fakeEngine) Resume(ctx context.Context, ns, id, by string) (*restart.Record, error) {
	return f.setIntent(ctx, ns, id, by, restart.IntentRun)
}
func (f *fakeEngine) Cancel(ctx context.Context, ns, id, by string) (*restart.Record, error) {
	return f.setIntent(ctx, ns, id, by, restart.IntentCancel)
}
func (f *fakeEngine) Answer(ctx context.Context, ns, id, answer, by string) (*restart.Record, error) {
	return store.Mutate(ctx, f.st, ns, id, func(r *restart.Record) error {
		if r.Question == nil {
			return errors.New("nothing to answer")
		}
		if _, err := restart.ParseAnswer(r.Question, answer); err != nil {
			return err
		}
		r.Control.Answer, r.Control.AnswerTo, r.Control.By = answer, r.Question.ID, by
		return nil
	})
}

// askingDrive restarts batch 1, asks whether to proceed, and ends as the answer says.
func askingDrive(ctx context.Context, f *fakeEngine, ns, id string, sink func(restart.Event)) (*restart.Record, error) {
	if _, err := f.emit(ctx, ns, id, sink, restart.Event{Type: restart.EventBatchStarted, Batch: 1, Message: "Restarting 1st batch of 1 allocations"}, func(r *restart.Record) {
		r.Status, r.CurrentBatch = restart.StatusRunning, 1
	}); err != nil {
		return nil, err
	}
	if _, err := f.emit(ctx, ns, id, sink, restart.Event{Type: restart.EventAllocDone, AllocID: "aaaaaaaa-0000-4000-8000-000000000001", Message: `Allocation "aaaaaaaa-0000-4000-8000-000000000001" is "running"`}, func(r *restart.Record) {
		r.Allocs[0].State = restart.AllocDone
	}); err != nil {
		return nil, err
	}
	q := restart.NewQuestion("q1", 1, false, false, false, true, time.Now())
	if _, err := f.emit(ctx, ns, id, sink, restart.Event{Type: restart.EventQuestion, Message: q.Prompt()}, func(r *restart.Record) {
		r.Status, r.Question = restart.StatusWaiting, q
	}); err != nil {
		return nil, err
	}
	rec, err := f.waitAnswer(ctx, ns, id, q.ID)
	if err != nil {
		return rec, err
	}
	ans, _ := restart.ParseAnswer(q, rec.Control.Answer)
	final := restart.StatusSucceeded
	if !ans.Proceed {
		final = restart.StatusCanceled
	}
	return f.emit(ctx, ns, id, sink, restart.Event{Type: restart.EventAnswer, Message: "answered " + rec.Control.Answer}, func(r *restart.Record) {
		r.Status, r.Question = final, nil
		if ans.Proceed {
			r.Allocs[1].State = restart.AllocDone
		}
	})
}

// runFake runs a command on the fake backend.
func runFake(t *testing.T, ctx context.Context, ses *fakeSession, interactive bool, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var out, errb simtest.SyncBuffer
	a := newApp(stdin, &out, &errb, func(string) string { return "" })
	a.interactive = interactive
	a.backend = fakeBackend{ses: ses}
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

func newFakeSession(t *testing.T) *fakeSession {
	t.Helper()
	st, err := localstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSession{st: st, drive: askingDrive}
}
