package notify

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

var t0 = time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)

// waitingRestart is a restart of job web that started, finished its first batch with
// errors and asks whether to go on.
func waitingRestart() *restart.Record {
	r := &restart.Record{ID: "6f1c2d3e-0000-4000-8000-000000000001", Namespace: "prod", Region: "eu", JobID: "web",
		Status: restart.StatusWaiting, Batches: 2, CurrentBatch: 1,
		Allocs:   []restart.AllocProgress{{ID: "a1", State: restart.AllocFailed}, {ID: "a2", State: restart.AllocPending}},
		Question: restart.NewQuestion("q1", 1, true, false, false, false, t0)}
	r.AppendEvent(restart.Event{Time: t0, Type: restart.EventCreated, Message: "created"})
	r.AppendEvent(restart.Event{Time: t0, Type: restart.EventStarted, Message: "Restarting 2 allocations"})
	r.AppendEvent(restart.Event{Time: t0, Type: restart.EventAllocFailed, Message: "a1 failed"})
	r.AppendEvent(restart.Event{Time: t0, Type: restart.EventQuestion, Batch: 1, Message: r.Question.Prompt()})
	return r
}

func triggers(ns []Notification) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Sink+":"+string(n.Trigger))
	}
	return out
}

func TestPendingFollowsSubscriptionsSeverityAndOutbox(t *testing.T) {
	meta := map[string]string{MetaPrefix + "succeeded,question": "team-web"}
	for _, tc := range []struct {
		name   string
		cfg    Config
		outbox *restart.Notifications
		meta   map[string]string
		fleet  string
		want   []string
	}{
		{name: "a sink no -notify-on names hears every trigger", cfg: Config{Sinks: []string{"ops"}},
			want: []string{"ops:started", "ops:question"}},
		{name: "-notify-min warning drops what is news only", cfg: Config{Sinks: []string{"ops"}, Min: SeverityWarning},
			want: []string{"ops:question"}},
		{name: "-notify-on narrows a sink", cfg: Config{Sinks: []string{"ops"}, On: Subscriptions{"ops": {TriggerBatchFailed}}},
			want: []string{"ops:batch-failed"}},
		{name: "none leaves a sink to the jobs' meta", cfg: Config{Sinks: []string{"ops", "team-web"}, On: Subscriptions{"ops": {}, "team-web": {}}},
			meta: meta, want: []string{"team-web:question"}},
		{name: "the restart's own subscriptions add", cfg: Config{Sinks: []string{"ops"}, On: Subscriptions{"ops": {}}},
			outbox: &restart.Notifications{Subscribe: map[string][]string{"started": {"ops"}}}, want: []string{"ops:started"}},
		{name: "what the outbox settled is not owed", cfg: Config{Sinks: []string{"ops"}},
			outbox: &restart.Notifications{Through: map[string]uint64{"ops": 2}}, want: []string{"ops:question"}},
		{name: "a fleet's job leaves its start to the fleet", cfg: Config{Sinks: []string{"ops"}}, fleet: "f1",
			want: []string{"ops:question"}},
		{name: "a sink unknown here is not sent to", cfg: Config{Sinks: nil}, meta: meta, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := waitingRestart()
			r.Notify, r.Fleet = tc.outbox, tc.fleet
			got := triggers(tc.cfg.Pending(RestartSubject(r), tc.meta))
			if !slices.Equal(got, tc.want) {
				t.Errorf("pending %v, want %v", got, tc.want)
			}
		})
	}
}

func TestQuestionMessageSaysHowToAnswer(t *testing.T) {
	r := waitingRestart()
	ns := Config{Sinks: []string{"ops"}, PageURL: "https://restarts.example.com/"}.Pending(RestartSubject(r), nil)
	if len(ns) != 2 {
		t.Fatalf("pending %v", triggers(ns))
	}
	m := ns[1].Message
	if m.Key != r.ID+"/4" || m.Trigger != TriggerQuestion || m.Severity != "warning" {
		t.Errorf("key %q trigger %s severity %s", m.Key, m.Trigger, m.Severity)
	}
	if m.Question == nil || m.Question.Command != "nomad-restart answer "+r.ID+" n" {
		t.Fatalf("question %+v, want the answer command with the default", m.Question)
	}
	if m.Link != "https://restarts.example.com/restart/"+r.ID {
		t.Errorf("link %q", m.Link)
	}
	for _, want := range []string{`Restart 6f1c2d3e of job "web" (namespace prod, region eu) is waiting for an answer`} {
		if m.Title != want {
			t.Errorf("title %q, want %q", m.Title, want)
		}
	}
	for _, want := range []string{"Ignore the errors above", "nomad-restart answer " + r.ID, "0 of 2 allocations restarted, 1 failed", "batch 1 of 2", "Page: https://restarts.example.com/restart/"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("text %q lacks %q", m.Text, want)
		}
	}
}

func TestConfigChangeSaysWhatChangedNeverItsValue(t *testing.T) {
	r := &restart.Record{ID: "r1", Namespace: "default", JobID: "web", Status: restart.StatusRunning,
		Triggers: []restart.Trigger{{Source: "nomad:app/db", OldIndex: 4, NewIndex: 9, ChangedAt: t0}}}
	r.AppendEvent(restart.Event{Time: t0, Type: restart.EventStarted, Message: "Restarting 1 allocation"})
	ns := Config{Sinks: []string{"ops"}}.Pending(RestartSubject(r), nil)
	if len(ns) != 1 || ns[0].Trigger != TriggerConfigChange {
		t.Fatalf("pending %v, want one config-change", triggers(ns))
	}
	if c := ns[0].Message.Changes; len(c) != 1 || !strings.Contains(c[0], "nomad:app/db changed (index 4 → 9)") {
		t.Errorf("changes %v", c)
	}
}

func TestStaleRendersSayStaleFound(t *testing.T) {
	r := &restart.Record{ID: "r1", Namespace: "default", JobID: "web", Status: restart.StatusRunning,
		Triggers: []restart.Trigger{{Source: "rendered:web/local/app.conf", Task: "web", Destination: "local/app.conf", Allocs: 2, ChangedAt: t0}}}
	r.AppendEvent(restart.Event{Time: t0, Type: restart.EventStarted, Message: "Restarting 2 allocations"})
	ns := Config{Sinks: []string{"ops"}}.Pending(RestartSubject(r), nil)
	if len(ns) != 1 || ns[0].Trigger != TriggerStaleFound || !strings.Contains(ns[0].Message.Text, `template "local/app.conf" of task "web" re-rendered`) {
		t.Fatalf("pending %v, want one stale-found naming the template", ns)
	}
}

func TestTriggersOfEvents(t *testing.T) {
	restartSubj := &Subject{Kind: steer.KindRestart}
	for _, tc := range []struct {
		ev   restart.Event
		want []Trigger
	}{
		{restart.Event{Type: restart.EventCreated, Message: `Restart of job "web" created by schedule nightly for its occurrence due ...`}, []Trigger{TriggerScheduleFired}},
		{restart.Event{Type: restart.EventCreated, Message: "created"}, nil},
		{restart.Event{Type: restart.EventQuestion, Message: "Proceed with the next batch? [Y/n]"}, []Trigger{TriggerQuestion}},
		{restart.Event{Type: restart.EventGateFailed}, []Trigger{TriggerGateFailed}},
		{restart.Event{Type: restart.EventFailed, Message: "Stopping job restart due to error: x"}, []Trigger{TriggerFailed, TriggerBatchFailed}},
		{restart.Event{Type: restart.EventFailed, Message: "Stopping job restart due to unrecoverable error: placement failure"}, []Trigger{TriggerFailed, TriggerBatchFailed}},
		{restart.Event{Type: restart.EventFailed, Message: "Job restart finished with errors: 1 allocation failed"}, []Trigger{TriggerFailed, TriggerBatchFailed}},
		{restart.Event{Type: restart.EventFailed, Message: "Stopping job restart: lost"}, []Trigger{TriggerFailed}},
		{restart.Event{Type: restart.EventCanceled}, []Trigger{TriggerCanceled}},
		{restart.Event{Type: restart.EventAllocDone}, nil},
	} {
		if got := triggersOf(restartSubj, tc.ev); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %v, want %v", tc.ev.Type, tc.ev.Message, got, tc.want)
		}
	}
	fleetSubj := &Subject{Kind: steer.KindFleet}
	if got := triggersOf(fleetSubj, restart.Event{Type: restart.EventSucceeded}); !slices.Equal(got, []Trigger{TriggerFleetFinished}) {
		t.Errorf("a fleet's end: %v", got)
	}
}

func TestParseOnAndMetaRefuseUnknownTriggers(t *testing.T) {
	subs, err := ParseOn([]string{"question,failed=ops,oncall", "all=audit"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(subs["oncall"], []Trigger{TriggerQuestion, TriggerFailed}) || len(subs["audit"]) != len(Triggers()) {
		t.Errorf("subscriptions %v", subs)
	}
	for _, bad := range []string{"question", "=ops", "restarted=ops"} {
		if _, err := ParseOn([]string{bad}); err == nil || !strings.Contains(err.Error(), "-notify-on") {
			t.Errorf("ParseOn(%q): %v, want a refusal naming -notify-on", bad, err)
		}
	}
	_, problems := FromMeta(map[string]string{MetaPrefix + "finished": "ops", MetaPrefix + "failed": "ops"})
	if len(problems) != 1 || !strings.Contains(problems[0], "unknown trigger \"finished\"") {
		t.Errorf("problems %v", problems)
	}
	if _, err := ParseSeverity("loud"); err == nil {
		t.Error("a severity that does not exist was taken")
	}
	back := FromRecord(subs.Record())
	if !slices.Equal(back["oncall"], subs["oncall"]) {
		t.Errorf("the record's subscriptions read back as %v", back)
	}
}

func TestLimiterFoldsAFloodIntoASummary(t *testing.T) {
	l := NewLimiter(2, time.Minute)
	admitted := 0
	for i := range 5 {
		if l.Admit(t0.Add(time.Duration(i) * time.Second)) {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("%d admitted, want the burst of 2", admitted)
	}
	if next := l.NextFree(t0.Add(5 * time.Second)); !next.Equal(t0.Add(time.Minute)) {
		t.Errorf("next free %v, want a minute after the first", next)
	}
	if !l.Admit(t0.Add(time.Minute + time.Second)) {
		t.Error("the window passed, and nothing was admitted")
	}
	var held []Notification
	for i, job := range []string{"a", "b", "a"} {
		held = append(held, Notification{Trigger: TriggerSucceeded, Message: Message{Job: job, ID: job, Severity: "info"}})
		if i == 2 {
			held[i].Trigger, held[i].Message.Severity = TriggerFailed, "error"
		}
	}
	s := Summary("ops", held, t0)
	if s.Summary == nil || s.Summary.Held != 3 || s.Summary.ByTrigger[TriggerSucceeded] != 2 || !slices.Equal(s.Summary.Subjects, []string{"a", "b"}) || s.Severity != "error" {
		t.Errorf("summary %+v (severity %s)", s.Summary, s.Severity)
	}
	if !strings.Contains(s.Text, "2 succeeded, 1 failed") || !strings.HasSuffix(s.Text, "About: a, b") {
		t.Errorf("text %q, want the counts and both jobs, with no ellipsis (none left unnamed)", s.Text)
	}
	held = nil
	for i := range 12 {
		held = append(held, Notification{Trigger: TriggerSucceeded, Message: Message{Job: fmt.Sprintf("job-%02d", i), Severity: "info"}})
	}
	if s := Summary("ops", held, t0); !strings.HasSuffix(s.Text, "job-09, ...") {
		t.Errorf("text %q, want the first ten jobs, then an ellipsis for the two unnamed", s.Text)
	}
}
