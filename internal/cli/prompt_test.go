package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

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
