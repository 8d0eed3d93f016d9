package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

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

// TestFleetPromptsOnATerminal drives fleets on a terminal, which asks the questions here:
// a job's restart's (its batch failed), then the fleet's own (its failure budget spent),
// each answered by a line typed.
func TestFleetPromptsOnATerminal(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "tp", 3, 1)

	c.FailTaskStarts("default", "tp-0", "main", 100)
	code, out, errOut := e.runIn(ctx, strings.NewReader("y\n"), true, "run", "-jobs", `Name matches "^tp-"`)
	t.Logf("job's question:\n%s\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "[tp-0] The last batch had the errors above.") || !strings.Contains(out, "Answer for tp-0: ") ||
		!strings.Contains(out, `[tp-0] Answer "y" by tester`) || strings.Contains(out, "Answer with `nomad-restart answer") {
		t.Fatalf("run on a terminal: exit %d", code)
	}
	// While nothing is asked, the line below the events shows the fleet's progress.
	if !regexp.MustCompile(`\x1b\[2Kjobs [0-3]/3 done[a-z0-9, ]*  elapsed `).MatchString(out) {
		t.Errorf("no progress line of the fleet on the terminal:\n%q", out)
	}

	// Every job fails at its turn (a task they lack): yes to the first question starts
	// the second job, no to the next ends the fleet failed, its third job canceled.
	code, out, errOut = e.runIn(ctx, strings.NewReader("y\nn\n"), true, "run", "-jobs", `Name matches "^tp-"`, "-task=nosuch")
	t.Logf("fleet's question:\n%s\n%s", out, errOut)
	if code != 1 || strings.Count(out, "Start the remaining jobs anyway (yes raises -max-failed-jobs to the failures so far)? [y/N]") != 2 || !strings.Contains(errOut, "answered no") {
		t.Fatalf("run on a terminal: exit %d", code)
	}
	f := fleetOf(t, ctx, e, fleetIDIn(t, out))
	if f.Status != restart.StatusFailed || f.Counts()[fleet.JobFailed] != 2 || f.Counts()[fleet.JobCanceled] != 1 {
		t.Errorf("fleet: %s %v", f.Status, f.Counts())
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
	var out, errb simtest.SyncBuffer
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
