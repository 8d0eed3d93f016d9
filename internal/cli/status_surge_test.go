package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestStatusShowsSurge: `status <id>` of a -surge restart shows each group's surge between
// the allocations and the events, and `status -json <id>` holds it; a restart without
// -surge shows no surge section.
func TestStatusShowsSurge(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 1))
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-on-error=fail", "-state=local", "-surge=1", "web")
	if code != 0 {
		t.Fatalf("run -surge: exit %d\n%s\n%s", code, out, errOut)
	}
	id, _ := createdID(t, out)

	code, out, errOut = e.run(ctx, "status", id)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	allocs, surge, events := strings.Index(out, "\nAllocations\n"), strings.Index(out, "\nSurge\n"), strings.Index(out, "\nRecent Events\n")
	if allocs < 0 || surge < allocs || events < surge {
		t.Fatalf("status: want the sections Allocations, Surge, Recent Events in that order:\n%s", out)
	}
	section := out[surge:events]
	for _, re := range []string{`(?m)^Group\s+From\s+To\s+Phase\s+Note$`, `(?m)^web\s+1\s+2\s+down\s+-$`} {
		if !regexp.MustCompile(re).MatchString(section) {
			t.Errorf("surge section lacks %s:\n%s", re, section)
		}
	}

	code, out, errOut = e.run(ctx, "status", "-json", id)
	if code != 0 {
		t.Fatalf("status -json: exit %d\n%s\n%s", code, out, errOut)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	var groups []restart.SurgeGroup
	if err := json.Unmarshal(raw["Surge"], &groups); err != nil {
		t.Fatalf("status -json Surge %s: %v", raw["Surge"], err)
	}
	if len(groups) != 1 || groups[0].Group != "web" || groups[0].From != 1 || groups[0].To != 2 || groups[0].Phase != restart.SurgeDown {
		t.Errorf("status -json Surge %+v, want web 1->2 down", groups)
	}

	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "web")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	plain, _ := createdID(t, out)
	if _, out, _ = e.run(ctx, "status", plain); strings.Contains(out, "\nSurge\n") || !strings.Contains(out, "\nRecent Events\n") {
		t.Errorf("status of a restart without -surge shows a surge section:\n%s", out)
	}
	if _, out, _ = e.run(ctx, "status", "-json", plain); strings.Contains(out, `"Surge"`) {
		t.Errorf("status -json of a restart without -surge has a Surge field:\n%s", out)
	}
}

// TestPrintSurgeNotes: the surge section shows each group's phase and its note on one line,
// IDs shortened unless -verbose.
func TestPrintSurgeNotes(t *testing.T) {
	const id = "0b1e3c52-8f2a-4d6e-9c41-7a5b2e9f1d30"
	note := "could not scale group \"api\" back to 2 (Permission denied)\nrestore it with `nomad job scale` for restart " + id
	surge := []restart.SurgeGroup{
		{Group: "web", From: 1, To: 2, Phase: restart.SurgeUp},
		{Group: "api", From: 2, To: 3, Phase: restart.SurgeLeft, Note: note},
	}
	cases := []struct {
		name    string
		verbose bool
		want    []string
	}{
		{name: "short IDs", want: []string{
			`(?m)^web\s+1\s+2\s+up\s+-$`,
			`(?m)^api\s+2\s+3\s+left\s+could not scale group "api" back to 2 \(Permission denied\) restore it with ` + "`nomad job scale`" + ` for restart 0b1e3c52$`}},
		{name: "verbose", verbose: true, want: []string{`(?m)for restart ` + id + `$`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb syncBuffer
			a := newApp(strings.NewReader(""), &out, &errb, func(string) string { return "" })
			printSurge(&out, a.printer(tc.verbose, false), surge)
			for _, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(out.String()) {
					t.Errorf("surge section lacks %s:\n%s", re, out.String())
				}
			}
			if n := strings.Count(out.String(), "\n"); n != 3+len(surge) {
				t.Errorf("%d lines, want %d (blank, title, header, one per group):\n%s", n, 3+len(surge), out.String())
			}
		})
	}
}

// TestCancelUndrivenSurgeCLI: `cancel` of a -surge restart whose driver stopped (Ctrl-C)
// with its surge up scales the group back before the restart ends canceled, and `status`
// then shows the surge down and the cancel's events.
func TestCancelUndrivenSurgeCLI(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 2))
	ctx := testCtx(t)
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	done := make(chan string, 1)
	go func() {
		_, out, _ := e.run(runCtx, "run", "-on-error=fail", "-state=local", "-surge=1", "-batch-size=1", "-batch-wait=1h", "web")
		done <- out
	}()
	// The surge is up and the first batch done: the driver waits an hour for the next.
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.DecidedBatch == 1 })
	interrupt()
	id, _ := createdID(t, <-done)
	if n := groupCount(t, c); n != 3 {
		t.Fatalf("count %d while detached, want the surge's 3", n)
	}

	code, out, errOut := e.run(ctx, "cancel", id)
	if code != 0 || !strings.Contains(out, "(status: canceled)") {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := groupCount(t, c); n != 2 {
		t.Errorf("count %d after the cancel, want 2 restored", n)
	}
	_, out, _ = e.run(ctx, "status", id)
	for _, re := range []string{`(?m)^Status\s+= canceled$`, `(?m)^web\s+2\s+3\s+down\s+-$`, `Scaling group "web" back to 2`,
		`Job restart canceled by tester\S*; surge over: group "web" is at its original count, 2`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status after the cancel lacks %s:\n%s", re, out)
		}
	}
}

// groupCount is the count of the job "web"'s group "web" in Nomad.
func groupCount(t *testing.T, c *nomadsim.Cluster) int {
	t.Helper()
	j, _, err := adminClient(t, c).Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	return *j.TaskGroups[0].Count
}
