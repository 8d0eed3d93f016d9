package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
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

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runFake runs a command on the fake backend.
func runFake(t *testing.T, ctx context.Context, ses *fakeSession, interactive bool, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncBuffer
	a := newApp(stdin, &out, &errb, func(string) string { return "" })
	a.interactive = interactive
	a.backend = fakeBackend{ses: ses}
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

func newFakeSession(t *testing.T) *fakeSession {
	t.Helper()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSession{st: st, drive: askingDrive}
}

func TestPromptReasksOnInvalidAnswer(t *testing.T) {
	ses := newFakeSession(t)
	code, out, errOut := runFake(t, context.Background(), ses, true, strings.NewReader("maybe\n30s\n"), "run", "-batch-wait=ask", "-state=local", "web")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := strings.Count(out, "Proceed with the next batch? [Y/n/<wait duration>]"); n != 2 {
		t.Fatalf("prompt shown %d times, want 2 (asked again after an invalid answer):\n%s", n, out)
	}
	if !strings.Contains(out, strings.Repeat(" ", 31)+`Invalid answer "maybe"`) {
		t.Fatalf("no Invalid answer line:\n%s", out)
	}
	if !strings.Contains(out, "answered 30s") || !strings.Contains(out, "Job restarted successfully!") {
		t.Fatalf("answer not submitted or no success line:\n%s", out)
	}
}

func TestPromptNoCancelsWithExitZero(t *testing.T) {
	ses := newFakeSession(t)
	code, out, errOut := runFake(t, context.Background(), ses, true, strings.NewReader("n\n"), "run", "-batch-wait=ask", "-state=local", "web")
	if code != 0 {
		t.Fatalf(`"no" before any error must exit 0 as Nomad does; exit %d\n%s\n%s`, code, out, errOut)
	}
	if strings.Contains(out, "Job restarted successfully!") {
		t.Fatalf("canceled restart reported as success:\n%s", out)
	}
}

func TestNoTerminalQuestionAnsweredFromAnotherCommand(t *testing.T) {
	ses := newFakeSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := <-goRun(func() (int, string, string) {
		return runFake(t, ctx, ses, false, strings.NewReader(""), "run", "-batch-wait=ask", "-yes=false", "-detach", "-state=local", "web")
	})
	if r.code != 0 || !strings.Contains(r.out, "created (state: local)") {
		t.Fatalf("run -detach: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	recs, err := ses.st.List(ctx, store.Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("list: %v %d", err, len(recs))
	}
	id := recs[0].ID[:8]

	// resume drives it here, without a terminal: the question is printed with how to answer.
	done := goRun(func() (int, string, string) {
		return runFake(t, ctx, ses, false, strings.NewReader(""), "resume", "-state=local", id)
	})
	simtest.WaitFor(t, ctx, "the restart to wait for an answer", func() bool {
		r, err := ses.st.Get(ctx, recs[0].Namespace, recs[0].ID)
		return err == nil && r.Status == restart.StatusWaiting
	})
	code, out, errOut := runFake(t, ctx, ses, false, nil, "answer", "-state=local", id, "bogus")
	if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "Invalid answer") {
		t.Fatalf("bogus answer: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runFake(t, ctx, ses, false, nil, "answer", "-state=local", id, "yes")
	if code != 0 {
		t.Fatalf("answer: exit %d\n%s\n%s", code, out, errOut)
	}
	r = <-done
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if !strings.Contains(r.out, "answer with `nomad-restart answer "+id+" yes|no|<duration>`") {
		t.Fatalf("no hint on how to answer:\n%s", r.out)
	}
	code, _, errOut = runFake(t, ctx, ses, false, nil, "answer", "-state=local", id, "yes")
	if code != 1 || !strings.Contains(errOut, "already ended") {
		t.Fatalf("answer after the end: exit %d: %s", code, errOut)
	}
}

func TestCtrlCDetaches(t *testing.T) {
	ses := newFakeSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	a := newApp(strings.NewReader(""), &out, &errb, func(string) string { return "" })
	a.backend = fakeBackend{ses: ses}
	done := make(chan int, 1)
	// A drive that runs until detached.
	ses.drive = func(ctx context.Context, f *fakeEngine, ns, id string, sink func(restart.Event)) (*restart.Record, error) {
		f.emit(ctx, ns, id, sink, restart.Event{Type: restart.EventStarted, Message: "started"}, func(r *restart.Record) { r.Status = restart.StatusRunning })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	go func() { done <- a.run(ctx, []string{"run", "-on-error=fail", "-state=local", "web"}) }()
	simtest.WaitFor(t, testCtx(t), "the drive to start", func() bool { return strings.Contains(out.String(), "started") })
	cancel()
	if code := <-done; code != 1 {
		t.Fatalf("detach exit %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "Detached from restart") || !strings.Contains(errb.String(), "nomad-restart resume") {
		t.Fatalf("stderr: %s", errb.String())
	}
}
