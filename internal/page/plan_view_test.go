package page

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestPlanViewSaysTheDrain: the new-restart form's plan says when the restart drains
// (and for how long), and not when it does not.
func TestPlanViewSaysTheDrain(t *testing.T) {
	for _, drain := range []time.Duration{0, 2 * time.Second} {
		rec := &restart.Record{JobID: "web", Namespace: "default", Spec: restart.Spec{Drain: drain, Health: restart.HealthChecks},
			Allocs: []restart.AllocProgress{{ID: "a1", Name: "web.web[0]", Group: "web", Batch: 1}}, Batches: 1}
		html, err := renderString(listPage, "plan", newPlanView(&engine.Plan{Record: rec}))
		if err != nil {
			t.Fatal(err)
		}
		says := strings.Contains(html, `class="plan-drain"`)
		if says != (drain > 0) || (drain > 0 && !strings.Contains(html, "for 2s")) {
			t.Errorf("drain %s: the plan says the drain %v:\n%s", drain, says, html)
		}
	}
}
