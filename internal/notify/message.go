package notify

import (
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// BodyVersion is the version of the generic webhook's JSON body
// (docs/schemas/notification.schema.json). A field added keeps it; a field renamed,
// removed or given another meaning raises it.
const BodyVersion = "1"

// Message is one notification: its text for chats and its JSON body for webhooks.
type Message struct {
	Version string `json:"version"`
	// Key identifies the notification: the record's ID and its event's sequence number. A
	// receiver that saw a key already may drop the message (a driver that crashed between
	// sending and recording sends it again).
	Key       string         `json:"key"`
	Trigger   Trigger        `json:"trigger"`
	Severity  string         `json:"severity"`
	Kind      steer.Kind     `json:"kind"`
	ID        string         `json:"id"`
	Namespace string         `json:"namespace"`
	Region    string         `json:"region,omitempty"`
	Job       string         `json:"job,omitempty"`
	Fleet     string         `json:"fleet,omitempty"`
	Status    restart.Status `json:"status"`
	Progress  Progress       `json:"progress"`
	// Title is one line; Text the lines that follow (plain text, the same in every sink).
	Title string `json:"title"`
	Text  string `json:"text"`
	// Question is the question waiting, with the command that answers it.
	Question *QuestionBody `json:"question,omitempty"`
	// Changes name what a config-change rollout answers (sources, never values).
	Changes []string `json:"changes,omitempty"`
	// Link is the agent's page for the record ("" when no page address is known).
	Link  string     `json:"link,omitempty"`
	Time  time.Time  `json:"time"`
	Event *EventBody `json:"event,omitempty"`
	// Summary counts the notifications a rate limit held back and folded into this one.
	Summary *SummaryBody `json:"summary,omitempty"`
}

// QuestionBody is a waiting question in a message.
type QuestionBody struct {
	ID      string `json:"id"`
	Text    string `json:"text"`
	Options string `json:"options"`
	// Command answers it; replace the last word with the answer wanted.
	Command string `json:"command"`
}

// EventBody is the record's event that raised the notification.
type EventBody struct {
	Seq     uint64            `json:"seq"`
	Type    restart.EventType `json:"type"`
	Message string            `json:"message"`
}

// SummaryBody says what a summary stands for.
type SummaryBody struct {
	Held      int             `json:"held"`
	ByTrigger map[Trigger]int `json:"by_trigger"`
	// Subjects name up to ten of the jobs (or fleets) the held notifications were about.
	Subjects []string `json:"subjects"`
}

// render builds the message of event ev of s for trigger t.
func render(s *Subject, ev restart.Event, t Trigger, pageURL string) Message {
	m := Message{Version: BodyVersion, Key: fmt.Sprintf("%s/%d", s.ID, ev.Seq), Trigger: t,
		Severity: severityOf(t, s.Status).String(), Kind: s.Kind, ID: s.ID, Namespace: s.Namespace,
		Region: s.Region, Job: s.JobID, Fleet: s.Fleet, Status: s.Status, Progress: s.Progress,
		Changes: s.Changes, Time: ev.Time.UTC(),
		Event: &EventBody{Seq: ev.Seq, Type: ev.Type, Message: ev.Message}}
	if pageURL != "" {
		m.Link = strings.TrimRight(pageURL, "/") + "/" + string(s.Kind) + "/" + s.ID
	}
	m.Title = title(s, t)
	lines := []string{ev.Message}
	if t == TriggerQuestion && s.Question != nil && s.Status == restart.StatusWaiting {
		q := s.Question
		m.Question = &QuestionBody{ID: q.ID, Text: q.Text, Options: q.Options,
			Command: fmt.Sprintf("nomad-restart answer %s %s", s.ID, q.Default)}
		lines = append(lines, "Answer with: "+m.Question.Command+" (answers: "+q.Options+")")
	}
	lines = append(lines, progressLine(s))
	for _, c := range s.Changes {
		lines = append(lines, "Changed: "+c)
	}
	if m.Link != "" {
		lines = append(lines, "Page: "+m.Link)
	}
	m.Text = strings.Join(lines, "\n")
	return m
}

// title is the one line that says what happened to what, and where.
func title(s *Subject, t Trigger) string {
	what := fmt.Sprintf("Restart %s of job %q (namespace %s, region %s)", short(s.ID), s.JobID, s.Namespace, s.Region)
	if s.Kind == steer.KindFleet {
		what = fmt.Sprintf("Fleet %s (namespace %s)", short(s.ID), s.Namespace)
	}
	switch t {
	case TriggerStarted, TriggerFleetStarted:
		return what + " started"
	case TriggerQuestion:
		return what + " is waiting for an answer"
	case TriggerBatchFailed:
		return what + ": a batch had errors"
	case TriggerGateFailed:
		return what + ": a metric gate failed"
	case TriggerPaused:
		return what + " is paused"
	case TriggerResumed:
		return what + " resumed"
	case TriggerCanceled:
		return what + " was canceled"
	case TriggerSucceeded:
		return what + " succeeded"
	case TriggerFailed:
		return what + " failed"
	case TriggerConfigChange:
		return what + " started: its configuration changed"
	case TriggerStaleFound:
		return what + " started: allocations run stale templates"
	case TriggerScheduleFired:
		return what + " was filed by its schedule"
	case TriggerFleetFinished:
		return what + " ended " + string(s.Status)
	}
	return what + ": " + string(t)
}

func progressLine(s *Subject) string {
	p := s.Progress
	if s.Kind == steer.KindFleet {
		return fmt.Sprintf("Jobs: %d selected, %d succeeded, %d failed, %d canceled, %d skipped, %d running",
			p.Jobs, p.Succeeded, p.Failed, p.Canceled, p.Skipped, p.Running)
	}
	return fmt.Sprintf("Progress: %d of %d allocations restarted, %d failed, %d skipped; batch %d of %d",
		p.Restarted, p.Allocs, p.Failed, p.Skipped, p.Batch, p.Batches)
}

// short is an ID's first 8 characters, as the command line shows them.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// TestMessage is what `nomad-restart notify test` sends.
func TestMessage(sink string, now time.Time) Message {
	return Message{Version: BodyVersion, Key: "test/" + sink, Trigger: "test", Severity: SeverityInfo.String(),
		Kind: steer.KindRestart, ID: "test", Namespace: "default", Status: restart.StatusSucceeded,
		Title: "nomad-restart test notification to " + sink,
		Text:  "If you read this, nomad-restart can notify " + sink + ".", Time: now.UTC()}
}
