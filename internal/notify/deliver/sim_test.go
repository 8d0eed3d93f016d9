package deliver_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/notify"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
	"github.com/nomad-restart/nomad-restart/internal/notify/notifytest"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// slackFormat is what Slack's incoming webhooks take: a text (the fallback shown in
// notifications), and blocks whose sections carry mrkdwn text.
func slackFormat(b map[string]any) error {
	if s, _ := b["text"].(string); s == "" {
		return fmt.Errorf("no text")
	}
	blocks, _ := b["blocks"].([]any)
	if len(blocks) == 0 {
		return fmt.Errorf("no blocks")
	}
	for _, bl := range blocks {
		m, _ := bl.(map[string]any)
		txt, _ := m["text"].(map[string]any)
		if m["type"] != "section" || txt["type"] != "mrkdwn" || txt["text"] == "" {
			return fmt.Errorf("block %v is not a section of mrkdwn", bl)
		}
	}
	return nil
}

// teamsFormat is what a Teams workflow's webhook trigger takes: a message whose
// attachments are Adaptive Cards (workflows refuse the older MessageCard).
func teamsFormat(b map[string]any) error {
	if b["type"] != "message" {
		return fmt.Errorf("type %v, want message", b["type"])
	}
	atts, _ := b["attachments"].([]any)
	if len(atts) != 1 {
		return fmt.Errorf("%d attachments", len(atts))
	}
	a, _ := atts[0].(map[string]any)
	card, _ := a["content"].(map[string]any)
	if a["contentType"] != "application/vnd.microsoft.card.adaptive" || card["type"] != "AdaptiveCard" {
		return fmt.Errorf("attachment %v is not an Adaptive Card", a)
	}
	if body, _ := card["body"].([]any); len(body) == 0 {
		return fmt.Errorf("an empty card")
	}
	return nil
}

// genericFormat is the documented body: every message has its version, key, trigger and
// the record's names.
func genericFormat(b map[string]any) error {
	for _, k := range []string{"version", "key", "trigger", "severity", "kind", "id", "namespace", "status", "title", "text", "time"} {
		if _, ok := b[k]; !ok {
			return fmt.Errorf("no %q", k)
		}
	}
	if b["version"] != notify.BodyVersion {
		return fmt.Errorf("version %v", b["version"])
	}
	return nil
}

// notifyEnv is a simulated cluster with a job and what drives and notifies its restarts.
type notifyEnv struct {
	*agenttest.Env
	gates engine.GatesConfig
}

func startNotifyEnv(t *testing.T, count int) *notifyEnv {
	e := &notifyEnv{Env: agenttest.StartEnv(t, nomadsim.Options{})}
	e.Register(t, "default", "web", count, nil)
	return e
}

// outbox starts an outbox on ctx with the sinks (name to URL) and cfg's other settings.
func (e *notifyEnv) outbox(t *testing.T, ctx context.Context, urls map[string]string, cfg deliver.Config) *deliver.Outbox {
	t.Helper()
	cfg.Sinks = map[string]deliver.Sink{}
	cfg.Notify.Sinks = nil
	for name, u := range urls {
		s, err := deliver.NewSink(u, &http.Client{}, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Sinks[name] = s
		cfg.Notify.Sinks = append(cfg.Notify.Sinks, name)
	}
	cfg.Restarts, cfg.Fleets = e.Store, e.Fleets
	if cfg.Backoff == 0 {
		cfg.Backoff = 20 * time.Millisecond
	}
	return deliver.New(ctx, cfg)
}

// engine is a driver named holder whose stored events go to box.
func (e *notifyEnv) engine(holder string, box engine.Outbox) *engine.Engine {
	return engine.New(engine.Config{Cluster: cluster.NewNomad(e.Client), Store: e.Store, Holder: holder,
		Health: e.Health(), Gates: e.gates, Outbox: box})
}

// file plans and records a restart of web for another driver, as run -detach does.
func (e *notifyEnv) file(t *testing.T, eng *engine.Engine, spec restart.Spec) *restart.Record {
	t.Helper()
	ctx := agenttest.Context(t)
	p, err := eng.Plan(ctx, engine.Request{Namespace: "default", Job: "web", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}
	return p.Record
}

// drive drives rec in the background; the channel gets its end.
func drive(ctx context.Context, eng *engine.Engine, rec *restart.Record) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := eng.Drive(ctx, rec.Namespace, rec.ID, nil)
		done <- err
	}()
	return done
}

// finish waits for the driver to return (done), has the outbox send what it still owes,
// as a process does before it exits, and returns the record as it ended.
func (e *notifyEnv) finish(t *testing.T, ctx context.Context, done <-chan error, box *deliver.Outbox, rec *restart.Record) *restart.Record {
	t.Helper()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := box.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return e.WaitEnd(t, rec)
}

// adopt drives rec, left waiting for an answer by a driver that let go, to its end with a
// second driver whose sink "team" is to; it answers the question once the sink heard it.
func (e *notifyEnv) adopt(t *testing.T, ctx context.Context, rec *restart.Record, to *notifytest.Receiver) *restart.Record {
	t.Helper()
	box := e.outbox(t, ctx, map[string]string{"team": to.URL("")}, deliver.Config{})
	eng := e.engine("driver:2", box)
	done := drive(ctx, eng, rec)
	to.WaitFor(ctx, "question", triggerIs(notify.TriggerQuestion))
	answerYes(t, ctx, eng, rec)
	return e.finish(t, ctx, done, box, rec)
}

// answerYes answers rec's question yes, as a user does.
func answerYes(t *testing.T, ctx context.Context, eng *engine.Engine, rec *restart.Record) {
	t.Helper()
	if _, err := eng.Answer(ctx, rec.Namespace, rec.ID, "y", "test"); err != nil {
		t.Fatal(err)
	}
}

func triggerIs(t notify.Trigger) func(map[string]any) bool {
	return func(b map[string]any) bool { return b["trigger"] == string(t) }
}

// keys counts the generic bodies by key.
func keys(bodies []map[string]any) map[string]int {
	out := map[string]int{}
	for _, b := range bodies {
		k, _ := b["key"].(string)
		out[k]++
	}
	return out
}

// TestE2EQuestionReachesWebhookSlackAndTeams: a restart that asks between batches sends
// its question, with the command that answers it and the page's link, to a generic
// webhook, a Slack and a Teams incoming webhook, each in the format the service takes;
// started, the question and succeeded reach each sink once, and the record says so.
func TestE2EQuestionReachesWebhookSlackAndTeams(t *testing.T) {
	e := startNotifyEnv(t, 2)
	ctx := agenttest.Context(t)
	hook := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	slack := notifytest.NewReceiver(t, notifytest.Answer{Check: slackFormat})
	teams := notifytest.NewReceiver(t, notifytest.Answer{Status: http.StatusAccepted, Check: teamsFormat})
	box := e.outbox(t, ctx, map[string]string{
		"hook": hook.URL("/nomad"), "slack": "slack+" + slack.URL("/services/T0/B0/x"), "teams": "teams+" + teams.URL("/workflows/1"),
	}, deliver.Config{Notify: notify.Config{PageURL: "https://restarts.example.com"}})
	eng := e.engine("driver:1", box)
	rec := e.file(t, eng, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true, OnError: restart.OnErrorFail})
	done := drive(ctx, eng, rec)

	q := hook.WaitFor(ctx, "question", triggerIs(notify.TriggerQuestion))
	question, _ := q["question"].(map[string]any)
	wantCmd := "nomad-restart answer " + rec.ID + " y"
	if question["command"] != wantCmd {
		t.Errorf("question %v, want the command %q", q["question"], wantCmd)
	}
	if q["link"] != "https://restarts.example.com/restart/"+rec.ID || q["job"] != "web" || q["namespace"] != "default" {
		t.Errorf("link %v, job %v, namespace %v", q["link"], q["job"], q["namespace"])
	}
	slackQ := slack.WaitFor(ctx, "question", func(b map[string]any) bool { return strings.Contains(fmt.Sprint(b["blocks"]), wantCmd) })
	if !strings.Contains(fmt.Sprint(slackQ["blocks"]), "https://restarts.example.com/restart/"+rec.ID) {
		t.Errorf("Slack's question has no page link: %v", slackQ)
	}
	teams.WaitFor(ctx, "question", func(b map[string]any) bool { return strings.Contains(fmt.Sprint(b["attachments"]), wantCmd) })

	answerYes(t, ctx, eng, rec)
	final := e.finish(t, ctx, done, box, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	want := []notify.Trigger{notify.TriggerStarted, notify.TriggerQuestion, notify.TriggerSucceeded}
	got := hook.Received()
	for _, tr := range want {
		n := 0
		for _, b := range got {
			if b["trigger"] == string(tr) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the webhook got %d %s notifications, want 1", n, tr)
		}
	}
	for k, n := range keys(got) {
		if n != 1 {
			t.Errorf("key %s sent %d times", k, n)
		}
	}
	if len(slack.Received()) != len(want) || len(teams.Received()) != len(want) {
		t.Errorf("Slack got %d, Teams %d messages, want %d each", len(slack.Received()), len(teams.Received()), len(want))
	}
	if final.Notify == nil || final.Notify.Sent != 3*len(want) || final.Notify.Failed != 0 {
		t.Fatalf("the record's notifications %+v, want %d sent", final.Notify, 3*len(want))
	}
	for _, sink := range []string{"hook", "slack", "teams"} {
		if final.Notify.Through[sink] != final.LastSeq() {
			t.Errorf("sink %s settled through %d, want the last event %d", sink, final.Notify.Through[sink], final.LastSeq())
		}
	}
}

// failingGate is a gate's Prometheus that measures every batch over its limit.
type failingGate struct{}

func (failingGate) Query(context.Context, string, time.Time) (gate.Sample, error) {
	return gate.Sample{Value: 0.31}, nil
}

// TestE2EGateFailureSendsOneMessage: a sink subscribed to gate failures hears the one
// gate that failed the restart, once, and nothing else of it.
func TestE2EGateFailureSendsOneMessage(t *testing.T) {
	e := startNotifyEnv(t, 3)
	e.gates = engine.GatesConfig{Querier: failingGate{}}
	ctx := agenttest.Context(t)
	hook := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	on, err := notify.ParseOn([]string{"gate-failed=oncall"})
	if err != nil {
		t.Fatal(err)
	}
	box := e.outbox(t, ctx, map[string]string{"oncall": hook.URL("")}, deliver.Config{Notify: notify.Config{On: on}})
	eng := e.engine("driver:1", box)
	p := gate.DefaultPolicy()
	p.Interval, p.Count = 20*time.Millisecond, 2
	rec := e.file(t, eng, restart.Spec{OnError: restart.OnErrorFail,
		Gates: &restart.Gates{Specs: []string{`errors: errors_ratio{job="{{job}}"} < 0.02`}, Policy: p}})
	final := e.finish(t, ctx, drive(ctx, eng, rec), box, rec)
	if final.Status != restart.StatusFailed {
		t.Fatalf("status %s, want failed by the gate", final.Status)
	}
	got := hook.Received()
	if len(got) != 1 || got[0]["trigger"] != string(notify.TriggerGateFailed) || got[0]["severity"] != "error" {
		t.Fatalf("the sink got %v, want one gate-failed message", got)
	}
	if text, _ := got[0]["text"].(string); !strings.Contains(text, "0.31") {
		t.Errorf("the message does not say the failing value: %q", text)
	}
}

// TestE2EAdoptionSendsEachOnce: the first driver stores the question but dies before its
// notification goes (its sink hangs); the driver that adopts the restart sends what was
// owed and what follows, and nothing the first one sent: every key reaches the sink once.
func TestE2EAdoptionSendsEachOnce(t *testing.T) {
	e := startNotifyEnv(t, 2)
	ctx := agenttest.Context(t)
	// One sink, "team", reached by each driver through its own URL: the first one's
	// answers the first message and hangs on the second.
	first := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	var calls atomic.Int32
	hanging := make(chan struct{})
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			first.Handler().ServeHTTP(w, r)
			return
		}
		select { // the driver dies while this request hangs
		case <-r.Context().Done():
		case <-hanging:
		}
	}))
	t.Cleanup(func() { close(hanging); flaky.Close() })
	second := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})

	ctx1, kill := context.WithCancel(ctx)
	box1 := e.outbox(t, ctx1, map[string]string{"team": flaky.URL}, deliver.Config{})
	eng1 := e.engine("driver:1", box1)
	rec := e.file(t, eng1, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true, OnError: restart.OnErrorFail})
	done1 := drive(ctx1, eng1, rec)
	first.WaitFor(ctx, "started", triggerIs(notify.TriggerStarted))
	agenttest.WaitRecord(t, e.Store, rec, "started notification recorded", func(r *restart.Record) bool {
		return r.Status == restart.StatusWaiting && r.Notify != nil && r.Notify.Sent == 1
	})
	simtest.WaitFor(t, ctx, "the question's notification in flight, hanging", func() bool { return calls.Load() >= 2 })
	kill()
	<-done1

	final := e.adopt(t, ctx, rec, second)
	all := append(first.Received(), second.Received()...)
	counts := keys(all)
	for k, n := range counts {
		if n != 1 {
			t.Errorf("key %s reached the sink %d times", k, n)
		}
	}
	var triggers []string
	for _, b := range all {
		triggers = append(triggers, fmt.Sprint(b["trigger"]))
	}
	if strings.Join(triggers, ",") != "started,question,succeeded" {
		t.Errorf("the sink heard %v, want started, question, succeeded once each", triggers)
	}
	if final.Notify == nil || final.Notify.Sent != 3 || final.Notify.Through["team"] != final.LastSeq() {
		t.Errorf("the record's notifications %+v, want 3 sent through the last event %d", final.Notify, final.LastSeq())
	}
}

// TestE2EFailingAndHangingSinksDelayNothing: a sink that answers 500 to everything and
// one that never answers, both retried for an hour, neither hold the restart: it ends,
// and its driver returns, while they are still being tried.
func TestE2EFailingAndHangingSinksDelayNothing(t *testing.T) {
	e := startNotifyEnv(t, 3)
	ctx := agenttest.Context(t)
	failing := notifytest.NewReceiver(t, notifytest.Answer{Status: http.StatusInternalServerError})
	hanging := notifytest.NewReceiver(t, notifytest.Answer{Hang: true})
	box := e.outbox(t, ctx, map[string]string{"failing": failing.URL(""), "hanging": hanging.URL("")},
		deliver.Config{RetryFor: time.Hour})
	eng := e.engine("driver:1", box)
	rec := e.file(t, eng, restart.Spec{Yes: true})
	if err := <-drive(ctx, eng, rec); err != nil {
		t.Fatal(err)
	}
	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	failing.WaitFor(ctx, "an attempt", func(map[string]any) bool { return true })
	hanging.WaitFor(ctx, "an attempt", func(map[string]any) bool { return true })
	if final.Notify != nil && (final.Notify.Sent > 0 || final.Notify.Failed > 0) {
		t.Errorf("notifications settled while their sinks fail or hang: %+v", final.Notify)
	}
	e.CheckOnce(t, final)
}

// TestE2EManyRestartsSendASummary: past a sink's rate limit (2 an hour here), what comes
// is folded into a summary, sent at once when the process flushes before it exits, and
// every record counts its notification settled (sent or summarized).
func TestE2EManyRestartsSendASummary(t *testing.T) {
	e := &notifyEnv{Env: agenttest.StartEnv(t, nomadsim.Options{})}
	const jobs = 6
	ids := e.RegisterJobs(t, "default", "api", jobs, 1, nil)
	ctx := agenttest.Context(t)
	hook := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	on, _ := notify.ParseOn([]string{"succeeded=hook"})
	box := e.outbox(t, ctx, map[string]string{"hook": hook.URL("")},
		deliver.Config{Notify: notify.Config{On: on}, Burst: 2, Window: time.Hour})
	eng := e.engine("driver:1", box)
	var recs []*restart.Record
	var dones []<-chan error
	for _, id := range ids {
		p, err := eng.Plan(ctx, engine.Request{Namespace: "default", Job: id, Spec: restart.Spec{Yes: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Create(ctx, p.Record); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, p.Record)
		dones = append(dones, drive(ctx, eng, p.Record))
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if err := box.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var held float64
	plain := 0
	for _, b := range hook.Received() {
		if s, ok := b["summary"].(map[string]any); ok {
			held += s["held"].(float64)
			continue
		}
		plain++
	}
	if plain != 2 || held != jobs-2 {
		t.Fatalf("%d messages of their own and %v in summaries for %d succeeded restarts, want the burst of 2 and the rest summarized", plain, held, jobs)
	}
	for _, r := range recs {
		final := e.WaitEnd(t, r)
		if final.Notify == nil || final.Notify.Sent != 1 {
			t.Errorf("restart of %s: notifications %+v, want 1 settled", final.JobID, final.Notify)
		}
	}
}

// TestE2EJobMetaSubscribesItsTeam: a job's nomad-restart.notify.<trigger> meta subscribes
// a sink that hears nothing else (-notify-on none=NAME); the other sink hears nothing. A
// meta key that subscribes no one (no such trigger, no such sink) is a warning in the
// process's log, naming the key or the sink.
func TestE2EJobMetaSubscribesItsTeam(t *testing.T) {
	e := &notifyEnv{Env: agenttest.StartEnv(t, nomadsim.Options{})}
	ctx := agenttest.Context(t)
	job := agenttest.Job("default", "web", 1, nil)
	job.Meta = map[string]string{notify.MetaPrefix + "succeeded": "team", // the job's own meta
		notify.MetaPrefix + "finished": "team", notify.MetaPrefix + "failed": "pager"} // typos
	if _, err := e.Sim.RegisterJob(job); err != nil {
		t.Fatal(err)
	}
	nc := cluster.NewNomad(e.Client)
	simtest.WaitFor(t, ctx, "web running, its deployment ended", func() bool {
		d, err := nc.ActiveDeployment(ctx, "default", "web")
		return agenttest.Running(ctx, e.Client, "default", "web", 1) && err == nil && d == nil
	})
	team, ops := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat}), notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	on, err := notify.ParseOn([]string{"none=team,ops"})
	if err != nil {
		t.Fatal(err)
	}
	jobs := cluster.NewNomad(e.Client)
	var logs simtest.SyncBuffer
	box := e.outbox(t, ctx, map[string]string{"team": team.URL(""), "ops": ops.URL("")}, deliver.Config{Notify: notify.Config{On: on},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		JobMeta: func(ctx context.Context, ns, job string) (map[string]string, error) {
			spec, err := jobs.JobSpec(ctx, ns, job)
			if err != nil {
				return nil, err
			}
			return spec.Meta, nil
		}})
	eng := e.engine("driver:1", box)
	rec := e.file(t, eng, restart.Spec{Yes: true})
	e.finish(t, ctx, drive(ctx, eng, rec), box, rec)
	got := team.Received()
	if len(got) != 1 || got[0]["trigger"] != string(notify.TriggerSucceeded) {
		t.Errorf("the job's team heard %v, want its succeeded only", got)
	}
	if n := len(ops.Received()); n != 0 {
		t.Errorf("a sink no one subscribed heard %d messages", n)
	}
	for _, want := range []string{`job meta nomad-restart.notify.finished: unknown trigger \"finished\"`, `sink \"pager\" is not one of this process's`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, logs.String())
		}
	}
}

// TestE2EBigRecordKeepsItsOutbox: a restart whose record is cut into chunks (more than a
// hundred allocations) keeps both its progress and its outbox through the notifier's
// writes between the driver's: every allocation restarted once, every notification once.
func TestE2EBigRecordKeepsItsOutbox(t *testing.T) {
	e := startNotifyEnv(t, 130)
	ctx := agenttest.Context(t)
	hook := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	box := e.outbox(t, ctx, map[string]string{"hook": hook.URL("")}, deliver.Config{})
	eng := e.engine("driver:1", box)
	rec := e.file(t, eng, restart.Spec{Yes: true, BatchSizes: []restart.BatchSize{{N: 50, Percent: true}}})
	final := e.finish(t, ctx, drive(ctx, eng, rec), box, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	e.CheckOnce(t, final)
	got := hook.Received()
	for k, n := range keys(got) {
		if n != 1 {
			t.Errorf("key %s sent %d times", k, n)
		}
	}
	if len(got) != 2 || final.Notify == nil || final.Notify.Sent != 2 || final.Notify.Through["hook"] != final.LastSeq() {
		t.Errorf("%d messages, the record's outbox %+v; want started and succeeded, settled through %d", len(got), final.Notify, final.LastSeq())
	}
}

// TestE2EGivenUpIsAWarningInTheLog: a notification that still fails when its retries'
// time is up is given up with a warning in the restart's log (through its driver while it
// runs, into the record once it ended), counted failed in its outbox.
func TestE2EGivenUpIsAWarningInTheLog(t *testing.T) {
	e := startNotifyEnv(t, 2)
	ctx := agenttest.Context(t)
	failing := notifytest.NewReceiver(t, notifytest.Answer{Status: http.StatusInternalServerError})
	var eng *engine.Engine // the engine's Note, handed to the outbox the engine is built with
	note := func(ctx context.Context, ns, id string, ev restart.Event) bool { return eng.Note(ctx, ns, id, ev) }
	box := e.outbox(t, ctx, map[string]string{"down": failing.SecretURL()}, deliver.Config{RetryFor: 100 * time.Millisecond, Note: note})
	eng = e.engine("driver:1", box)
	rec := e.file(t, eng, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true, OnError: restart.OnErrorFail})
	done := drive(ctx, eng, rec)
	agenttest.WaitRecord(t, e.Store, rec, "the question waiting and its notification given up", func(r *restart.Record) bool {
		return r.Status == restart.StatusWaiting && r.Notify != nil && r.Notify.Failed == 2
	})
	answerYes(t, ctx, eng, rec)
	final := e.finish(t, ctx, done, box, rec)
	var warnings []string
	for _, ev := range final.Events {
		if ev.Type == restart.EventWarning && strings.Contains(ev.Message, "was given up") {
			warnings = append(warnings, ev.Message)
		}
	}
	if len(warnings) != 3 || final.Notify.Failed != 3 || final.Notify.Sent != 0 {
		t.Fatalf("warnings %q, outbox %+v: want the started, question and succeeded notifications given up, each a warning", warnings, final.Notify)
	}
	for _, w := range warnings {
		if !strings.Contains(w, `sink "down"`) || !strings.Contains(w, "500 Internal Server Error") || strings.Contains(w, notifytest.Secret) {
			t.Errorf("warning %q: want the sink's name and answer, never its URL", w)
		}
	}
}

// TestE2EFleetGivenUpIsAWarningInItsLog: a fleet's notification given up is a warning in
// the fleet's log, as a restart's is in the restart's, and counted failed in its outbox.
func TestE2EFleetGivenUpIsAWarningInItsLog(t *testing.T) {
	e := &notifyEnv{Env: agenttest.StartEnv(t, nomadsim.Options{})}
	e.RegisterJobs(t, "default", "fl", 2, 1, nil)
	ctx := agenttest.Context(t)
	failing := notifytest.NewReceiver(t, notifytest.Answer{Status: http.StatusInternalServerError})
	on, err := notify.ParseOn([]string{"fleet-started=down"})
	if err != nil {
		t.Fatal(err)
	}
	box := e.outbox(t, ctx, map[string]string{"down": failing.SecretURL()}, deliver.Config{Notify: notify.Config{On: on}, RetryFor: 100 * time.Millisecond})
	rec := e.FileFleet(t, "fl", 1)
	box.StoredFleet(rec.Namespace, rec.ID)
	final := e.WaitFleet(t, rec, "its notification given up", func(r *fleet.Record) bool { return r.Notify != nil && r.Notify.Failed == 1 })
	var warnings []string
	for _, ev := range final.Events {
		if ev.Type == restart.EventWarning && strings.Contains(ev.Message, "was given up") {
			warnings = append(warnings, ev.Message)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `fleet-started notification`) || !strings.Contains(warnings[0], `sink "down"`) || strings.Contains(warnings[0], notifytest.Secret) {
		t.Errorf("the fleet's warnings %q: want the fleet-started notification to sink down given up, never its URL", warnings)
	}
}

// TestE2EFormerDriverDoesNotSendWhatTheAdopterSent: a driver whose sink failed lets go
// of the restart while its outbox still retries; the driver that adopts it sends and
// settles what was owed. When the first one's sink answers again, it sends nothing the
// record says was settled: every key reaches the sink once.
func TestE2EFormerDriverDoesNotSendWhatTheAdopterSent(t *testing.T) {
	e := startNotifyEnv(t, 2)
	ctx := agenttest.Context(t)
	// One sink, "team", reached by each driver through its own URL: the first one's
	// answers 500 until released, and keeps only what it answered 200.
	first, second := notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat}), notifytest.NewReceiver(t, notifytest.Answer{Check: genericFormat})
	var down atomic.Bool
	down.Store(true)
	attempts := make(chan struct{}, 1000)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts <- struct{}{}
		if down.Load() {
			http.Error(w, "unavailable", http.StatusInternalServerError)
			return
		}
		first.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(flaky.Close)

	box1 := e.outbox(t, ctx, map[string]string{"team": flaky.URL}, deliver.Config{RetryFor: time.Hour})
	driverCtx, letGo := context.WithCancel(ctx)
	eng1 := e.engine("driver:1", box1)
	rec := e.file(t, eng1, restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true, OnError: restart.OnErrorFail})
	done1 := drive(driverCtx, eng1, rec)
	agenttest.WaitRecord(t, e.Store, rec, "the question asked", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	<-attempts // the first driver's outbox is retrying
	letGo()
	<-done1

	final := e.adopt(t, ctx, rec, second)

	down.Store(false)
	if err := box1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all := append(first.Received(), second.Received()...)
	for k, n := range keys(all) {
		if n != 1 {
			t.Errorf("key %s reached the sink %d times", k, n)
		}
	}
	if final.Notify == nil || final.Notify.Through["team"] != final.LastSeq() {
		t.Errorf("the record's notifications %+v, want the sink settled through the last event %d", final.Notify, final.LastSeq())
	}
}
