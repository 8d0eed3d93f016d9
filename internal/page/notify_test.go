package page_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestRestartPageShowsNotifications: a restart's page lists the notifications its record
// settled, sent and failed, with why a failed one was given up.
func TestRestartPageShowsNotifications(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.Register(t, "default", "web", 1, nil)
	a := e.newAgent(t, "agent", e.Sim.BootstrapToken(), nil)
	srv := serve(t, a, nil)
	defer agenttest.Run(t, a)()
	rec := e.Detached(t, "default", "web", restart.Spec{Yes: true})
	e.WaitSucceeded(t, rec)
	now := time.Now()
	if _, err := store.Mutate(agenttest.Context(t), e.Store, rec.Namespace, rec.ID, func(r *restart.Record) error {
		r.Notify = &restart.Notifications{}
		r.Notify.Settle(restart.Delivery{Sink: "ops", Seq: 2, Trigger: "started", Outcome: restart.DeliverySent, Time: now})
		r.Notify.Settle(restart.Delivery{Sink: "chat", Seq: 2, Trigger: "started", Outcome: restart.DeliveryFailed, Time: now,
			Error: "POST https://hooks.slack.com/…: 500 Internal Server Error"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var body string
	agenttest.WaitRecord(t, e.Store, rec, "notifications stored", func(r *restart.Record) bool { return r.Notify != nil })
	for range 100 { // the page's view of the records may be a moment old
		if body = agenttest.Get(t, srv.URL+"/restart/"+rec.ID, 200); strings.Contains(body, `id="notifications"`) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{`<p id="notifications-summary">1 sent, 1 failed</p>`, `data-outcome="sent"`, `data-outcome="failed"`, "500 Internal Server Error"} {
		if !strings.Contains(body, want) {
			t.Errorf("the restart's page lacks %q", want)
		}
	}
}
