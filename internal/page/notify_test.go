package page

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestRestartPageShowsNotifications: a restart's page lists the notifications its record
// settled, sent and failed, with why a failed one was given up.
func TestRestartPageShowsNotifications(t *testing.T) {
	now := time.Now()
	rec := timelineRecord(now.Add(-time.Minute))
	rec.Notify = &restart.Notifications{}
	rec.Notify.Settle(restart.Delivery{Sink: "ops", Seq: 2, Trigger: "started", Outcome: restart.DeliverySent, Time: now})
	rec.Notify.Settle(restart.Delivery{Sink: "chat", Seq: 2, Trigger: "started", Outcome: restart.DeliveryFailed, Time: now,
		Error: "POST https://hooks.slack.com/…: 500 Internal Server Error"})
	html, err := renderString(restartPage, "restartLive", restartLive{Rec: rec, Timeline: buildTimeline(rec, now)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<p id="notifications-summary">1 sent, 1 failed</p>`, `data-outcome="sent"`, `data-outcome="failed"`, "500 Internal Server Error"} {
		if !strings.Contains(html, want) {
			t.Errorf("the restart's page lacks %q", want)
		}
	}
	rec.Notify = nil
	if html, _ := renderString(restartPage, "restartLive", restartLive{Rec: rec, Timeline: buildTimeline(rec, now)}); strings.Contains(html, `id="notifications"`) {
		t.Errorf("a restart that notified nothing shows a notifications table")
	}
}
