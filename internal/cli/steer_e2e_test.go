package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestDetachStatusResume(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 3))
	ctx := testCtx(t)

	before := c.Stats().Endpoints
	id, out := e.runDetached(t, ctx, "-batch-size=2", "web")
	if _, kind := createdID(t, out); kind != "nomad" || !strings.Contains(out, "nomad-restart resume "+id) {
		t.Fatalf("want the Nomad store and how to resume:\n%s", out)
	}
	if n := requests(c.Stats(), "/v1/client/allocation/:id/restart") - requestsOf(before, "/v1/client/allocation/:id/restart"); n != 0 {
		t.Fatalf("-detach restarted %d allocations", n)
	}
	rec := statusOf(t, ctx, e, id)
	if rec.Status != restart.StatusPending || rec.JobID != "web" || len(rec.Allocs) != 3 || rec.Batches != 2 {
		t.Fatalf("status after -detach: %+v", rec)
	}

	// The list shows it, newest first, as JSON and as a table.
	code, out, _ := e.run(ctx, "status", "-json", "-job=web")
	var list []restart.Record
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != rec.ID {
		t.Fatalf("status -json list: %d\n%s", code, out)
	}
	code, out, _ = e.run(ctx, "status")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "pending") {
		t.Fatalf("status table: %d\n%s", code, out)
	}

	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "Resuming restart "+id) || !strings.Contains(out, "Job restarted successfully!") {
		t.Fatalf("resume output:\n%s", out)
	}
	assertRestartedOnce(t, c, "web")
	if rec := statusOf(t, ctx, e, id); rec.Status != restart.StatusSucceeded {
		t.Fatalf("status after resume: %s", rec.Status)
	}
	code, out, _ = e.run(ctx, "status", id)
	for _, s := range []string{"Status", "= succeeded", "Allocations", "Batch", "Recent Events"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Fatalf("status detail lacks %q:\n%s", s, out)
		}
	}
}

func TestAttachFollowsToTheEnd(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 3))
	ctx := testCtx(t)
	id, _ := e.runDetached(t, ctx, "web")

	attached := e.start(ctx, "attach", id)
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", code, out, errOut)
	}
	r := <-attached
	if r.code != 0 {
		t.Fatalf("attach: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, s := range []string{"Attached to restart " + id, "Restarting 3 allocations", "Job restart finished", "Job restarted successfully!"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("attach output lacks %q:\n%s", s, r.out)
		}
	}
	// attach on an ended restart prints it and exits with its result.
	code, out, _ = e.run(ctx, "attach", id)
	if code != 0 || !strings.Contains(out, "Job restart finished") {
		t.Fatalf("attach after the end: %d\n%s", code, out)
	}
}

func TestPauseResumeCancelFromAnotherCommand(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{TimeScale: 5}, simpleJob("web", api.JobTypeService, 4))
	ctx := testCtx(t)

	done := e.start(ctx, "run", "-on-error=fail", "web")
	id := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.CurrentBatch >= 1 })
	if code, out, errOut := e.run(ctx, "pause", id); code != 0 || !strings.Contains(out, "Pause requested") {
		t.Fatalf("pause: %d\n%s\n%s", code, out, errOut)
	}
	rec := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusPaused })
	_ = rec
	paused := statusOf(t, ctx, e, id)
	donePaused := 0
	for _, a := range paused.Allocs {
		if a.State == restart.AllocDone {
			donePaused++
		}
	}
	if donePaused == 0 || donePaused == 4 {
		t.Fatalf("paused with %d of 4 allocations done; want a pause between batches", donePaused)
	}
	if code, out, errOut := e.run(ctx, "resume", "-detach", id); code != 0 {
		t.Fatalf("resume -detach: %d\n%s\n%s", code, out, errOut)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "Restart paused") || !strings.Contains(r.out, "Restart resumed") {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	assertRestartedOnce(t, c, "web")

	// A second restart of the same job, canceled after its first batch.
	done = e.start(ctx, "run", "-on-error=fail", "web")
	id2 := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.ID[:8] != id && r.CurrentBatch >= 1 })
	if code, out, errOut := e.run(ctx, "cancel", id2); code != 0 || !strings.Contains(out, "Cancel requested") {
		t.Fatalf("cancel: %d\n%s\n%s", code, out, errOut)
	}
	r = <-done
	if r.code != 1 || !strings.Contains(r.out, "canceled") {
		t.Fatalf("run canceled from another command must exit 1: %d\n%s\n%s", r.code, r.out, r.err)
	}
	final := statusOf(t, ctx, e, id2)
	if final.Status != restart.StatusCanceled {
		t.Fatalf("status %s", final.Status)
	}
	restartedTwice := 0
	for _, tasks := range restarts(t, c, "web") {
		if tasks["main"] > 2 {
			t.Fatalf("an allocation restarted %d times", tasks["main"])
		}
		if tasks["main"] == 2 {
			restartedTwice++
		}
	}
	if restartedTwice == 0 || restartedTwice == 4 {
		t.Fatalf("%d allocations restarted by the canceled restart; want some, not all", restartedTwice)
	}
}

func TestAnswerDetachedBatchWaitAsk(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 3))
	ctx := testCtx(t)
	id, _ := e.runDetached(t, ctx, "-batch-wait=ask", "-on-error=fail", "web")
	done := e.start(ctx, "resume", id)
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	if code, out, errOut := e.run(ctx, "answer", id, "maybe"); code != 1 || !strings.Contains(errOut, "Invalid answer") {
		t.Fatalf("invalid answer: %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := e.run(ctx, "answer", id, "yes"); code != 0 {
		t.Fatalf("answer yes: %d\n%s\n%s", code, out, errOut)
	}
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting && r.CurrentBatch >= 2 })
	// A duration proceeds and replaces ask for the rest of the restart.
	if code, out, errOut := e.run(ctx, "answer", id, "0s"); code != 0 {
		t.Fatalf("answer 0s: %d\n%s\n%s", code, out, errOut)
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, s := range []string{"Proceed with the next batch? [Y/n/<wait duration>]", "answer with `nomad-restart answer " + id, "Proceeding restarts with new wait time of 0s"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("output lacks %q:\n%s", s, r.out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^==> \S+: Proceed with the next batch\?`).FindAllString(r.out, -1)); n != 2 {
		t.Errorf("want 2 questions (none after the duration answer):\n%s", r.out)
	}
	assertRestartedOnce(t, c, "web")
}

// TestResumeWhileDrivenFollows: a resume while another process drives the restart sets the
// intent and follows the driver instead of driving twice.
func TestResumeWhileDrivenFollows(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{TimeScale: 5}, simpleJob("web", api.JobTypeService, 3))
	ctx := testCtx(t)
	done := e.start(ctx, "run", "-on-error=fail", "web")
	id := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusRunning })
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 || !strings.Contains(out, "; waiting for it") || !strings.Contains(out, "Job restarted successfully!") {
		t.Fatalf("second resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if r := <-done; r.code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	assertRestartedOnce(t, c, "web")
}
