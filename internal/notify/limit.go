package notify

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Rate limit defaults: a sink gets at most DefaultBurst messages in any DefaultWindow;
// what comes beyond waits for the window's end and goes as one summary, so that a fleet
// of 500 jobs says so in a few messages, not 500.
const (
	DefaultBurst  = 10
	DefaultWindow = time.Minute
)

// Limiter is one sink's rate limit: a sliding window of the messages sent. It is not
// safe for concurrent use (one sink's sender owns it).
type Limiter struct {
	Burst  int
	Window time.Duration
	sent   []time.Time
}

// NewLimiter is a limiter of burst messages per window (zero values: the defaults).
func NewLimiter(burst int, window time.Duration) *Limiter {
	if burst <= 0 {
		burst = DefaultBurst
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return &Limiter{Burst: burst, Window: window}
}

// Admit reports whether a message may go at now, and counts it when it may.
func (l *Limiter) Admit(now time.Time) bool {
	l.sent = slices.DeleteFunc(l.sent, func(t time.Time) bool { return !t.After(now.Add(-l.Window)) })
	if len(l.sent) >= l.Burst {
		return false
	}
	l.sent = append(l.sent, now)
	return true
}

// NextFree is when the next message may go (now when one may go at once).
func (l *Limiter) NextFree(now time.Time) time.Time {
	live := 0
	var oldest time.Time
	for _, t := range l.sent {
		if t.After(now.Add(-l.Window)) {
			if live == 0 || t.Before(oldest) {
				oldest = t
			}
			live++
		}
	}
	if live < l.Burst {
		return now
	}
	return oldest.Add(l.Window)
}

// Summary is one message standing for the held notifications of one sink: how many, by
// trigger, and which jobs (or fleets) they spoke of. held must not be empty.
func Summary(sink string, held []Notification, now time.Time) Message {
	by := map[Trigger]int{}
	var subjects []string // the first ten named
	about := map[string]bool{}
	worst := SeverityInfo
	for _, n := range held {
		by[n.Trigger]++
		name := n.Message.Job
		if name == "" {
			name = "fleet " + short(n.Message.ID)
		}
		if !about[name] && len(subjects) < 10 {
			subjects = append(subjects, name)
		}
		about[name] = true
		if sev, err := ParseSeverity(n.Message.Severity); err == nil && sev > worst {
			worst = sev
		}
	}
	var counts []string
	for _, t := range Triggers() {
		if by[t] > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", by[t], t))
		}
	}
	first := held[0].Message
	text := fmt.Sprintf("%d notifications held back by the rate limit of %s: %s.\nAbout: %s",
		len(held), sink, strings.Join(counts, ", "), strings.Join(subjects, ", "))
	if len(about) > len(subjects) {
		text += ", ..."
	}
	return Message{Version: BodyVersion, Key: fmt.Sprintf("summary/%s/%d", sink, now.UnixNano()), Trigger: "summary",
		Severity: worst.String(), Kind: first.Kind, ID: first.ID, Namespace: first.Namespace,
		Status: first.Status, Title: fmt.Sprintf("nomad-restart: %d more notifications", len(held)),
		Text: text, Time: now.UTC(), Summary: &SummaryBody{Held: len(held), ByTrigger: by, Subjects: subjects}}
}
