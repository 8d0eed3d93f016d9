package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// A config-change rollout's record names what triggered it, and its options say which
// allocations it keeps (those whose tasks started before the change).
func TestStatusShowsTriggers(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	a := newApp(strings.NewReader(""), &out, &out, func(string) string { return "" })
	a.now = func() time.Time { return at.Add(time.Minute) }
	rec := &restart.Record{ID: "0b0c3e52-7a3f-4a55-9d3e-2f4c6a1b9e10", JobID: "web", Namespace: "default",
		Status: restart.StatusRunning, Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, StartedBefore: at},
		Triggers: []restart.Trigger{
			{Source: "nomad:nomad/jobs/web/config", OldIndex: 7, NewIndex: 9, ChangedAt: at.Add(-time.Minute)},
			{Source: "consul:web/config@dc1", OldIndex: 40, NewIndex: 41, ChangedAt: at},
		}}
	a.printRecord(rec, "nomad", false, leaseHeld)
	for _, want := range []string{
		"Triggered By = nomad:nomad/jobs/web/config changed (index 7 → 9) at 2026-12-01T11:59:00Z",
		"Triggered By = consul:web/config@dc1 changed (index 40 → 41) at 2026-12-01T12:00:00Z",
		"started-before=2026-12-01T12:00:00Z",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
