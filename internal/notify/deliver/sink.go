// Package deliver sends notifications: the sinks (a generic webhook with the documented
// JSON body, Slack's and Teams' incoming webhooks, and every service shoutrrr knows by its
// URL), and the outbox that sends what records owe, off the restarts' path, with retries
// for a bounded time and a rate limit per sink, and records each delivery in its record
// with check-and-set.
package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/nomad-restart/nomad-restart/internal/notify"
)

// Sink sends messages to one destination.
type Sink interface {
	// Send delivers m once; an error says why not (never the sink's whole URL).
	Send(ctx context.Context, m notify.Message) error
	// Where is the sink's URL as it may be shown: its scheme and host only.
	Where() string
}

// Scheme prefixes that choose our own formats for a service's incoming webhook, whatever
// its host (shoutrrr's slack:// and teams:// address the services by their tokens instead).
const (
	schemeSlack = "slack+"
	schemeTeams = "teams+"
)

// NewSink builds the sink a URL names: http(s) a generic webhook (the JSON body, POSTed),
// slack+https Slack's incoming webhook, teams+https a Teams workflow's webhook (an
// Adaptive Card), any other scheme a shoutrrr service (discord://, telegram://, ntfy://,
// smtp://, ...). client sends the webhooks' requests; timeout bounds one attempt.
func NewSink(rawURL string, client *http.Client, timeout time.Duration) (Sink, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%s is not a URL: give http(s)://..., slack+https://..., teams+https://... or a shoutrrr service URL", Redact(rawURL))
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme == "http" || scheme == "https":
		return &webhook{url: rawURL, client: client, timeout: timeout, format: genericBody}, nil
	case strings.HasPrefix(scheme, schemeSlack), strings.HasPrefix(scheme, schemeTeams):
		inner := rawURL[strings.Index(rawURL, "+")+1:]
		iu, err := url.Parse(inner)
		if err != nil || (iu.Scheme != "http" && iu.Scheme != "https") || iu.Host == "" {
			return nil, fmt.Errorf("%s needs an http(s) webhook URL after the +, as in %shttps://hooks.example.com/<path>", Redact(rawURL), scheme[:strings.Index(scheme, "+")+1])
		}
		format := slackBody
		if strings.HasPrefix(scheme, schemeTeams) {
			format = teamsBody
		}
		return &webhook{url: inner, client: client, timeout: timeout, format: format}, nil
	}
	// shoutrrr's logger would print the URLs it converts: it gets none.
	r, err := router.New(log.New(io.Discard, "", 0))
	if err != nil {
		return nil, fmt.Errorf("setting up shoutrrr: %w", err)
	}
	service, err := r.Locate(rawURL)
	if err != nil {
		// shoutrrr's errors may quote the URL: say what failed without it.
		return nil, fmt.Errorf("%s is not a URL shoutrrr can send to: check its scheme and parts (services: %s)", Redact(rawURL), strings.Join(slices.Sorted(slices.Values(r.ListServices())), ", "))
	}
	return &shoutrrrSink{url: rawURL, service: service}, nil
}

// Redact is a URL as it may be printed or logged: its scheme and host, never its path,
// query or user part (where webhooks and services keep their secrets).
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return "<a URL that does not parse>"
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" && !strings.HasSuffix(scheme, "+http") && !strings.HasSuffix(scheme, "+https") {
		// A service's URL (shoutrrr's) keeps its tokens anywhere, its host included.
		return u.Scheme + "://…"
	}
	out := u.Scheme + "://" + u.Host
	if u.User != nil || u.Path != "" || u.RawQuery != "" || u.Opaque != "" {
		out += "/…"
	}
	return out
}

// urlInText finds the URLs an error's text quotes.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://[^\s"'<>]+`)

// redactText is an error's text with every URL in it redacted. A shoutrrr service, or
// net/http under it, quotes the URL it posted to, which is the service's API URL with the
// token in its path (Discord's, Telegram's), not the shoutrrr URL the sink was given: no
// replacement of the one URL we know can catch it.
func redactText(text string) string {
	return urlInText.ReplaceAllStringFunc(text, Redact)
}

// webhook POSTs a JSON body to an http(s) URL.
type webhook struct {
	url     string
	client  *http.Client
	timeout time.Duration
	format  func(notify.Message) any
}

func (w *webhook) Where() string { return Redact(w.url) }

func (w *webhook) Send(ctx context.Context, m notify.Message) error {
	body, err := json.Marshal(w.format(m))
	if err != nil {
		return fmt.Errorf("encoding the message: %w", err)
	}
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %s", w.Where(), redactText(err.Error()))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.Key)
	resp, err := w.client.Do(req)
	if err != nil {
		// url.Error quotes the whole URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("POST %s: %s", w.Where(), redactText(err.Error()))
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		// What the service answers may quote the request's URL.
		return fmt.Errorf("POST %s: %s: %s", w.Where(), resp.Status, redactText(strings.TrimSpace(string(text))))
	}
	return nil
}

// genericBody is the documented JSON body itself.
func genericBody(m notify.Message) any { return m }

// slackBody is a Slack incoming webhook's message: text (shown in notifications and
// where blocks are not) and one section of mrkdwn.
func slackBody(m notify.Message) any {
	text := "*" + m.Title + "*\n" + m.Text
	return map[string]any{
		"text": m.Title,
		"blocks": []any{map[string]any{
			"type": "section",
			"text": map[string]any{"type": "mrkdwn", "text": text},
		}},
	}
}

// teamsBody is what a Teams workflow's "when a webhook request is received" trigger
// posts: a message whose attachment is an Adaptive Card (workflows take no MessageCard).
func teamsBody(m notify.Message) any {
	body := []any{map[string]any{"type": "TextBlock", "text": m.Title, "weight": "bolder", "wrap": true}}
	for _, line := range strings.Split(m.Text, "\n") {
		body = append(body, map[string]any{"type": "TextBlock", "text": line, "wrap": true})
	}
	card := map[string]any{
		"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
		"type":    "AdaptiveCard",
		"version": "1.4",
		"body":    body,
	}
	if m.Link != "" {
		card["actions"] = []any{map[string]any{"type": "Action.OpenUrl", "title": "Open the page", "url": m.Link}}
	}
	return map[string]any{
		"type":        "message",
		"attachments": []any{map[string]any{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}},
	}
}

// shoutrrrSink sends through a shoutrrr service. shoutrrr's Send takes no context: a
// send that outlives ctx is left to the service's own client timeout, and the outbox
// moves on.
type shoutrrrSink struct {
	url     string
	service types.Service
}

func (s *shoutrrrSink) Where() string { return Redact(s.url) }

func (s *shoutrrrSink) Send(ctx context.Context, m notify.Message) error {
	done := make(chan error, 1)
	go func() {
		done <- s.service.Send(m.Title+"\n"+m.Text, nil)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("sending to %s: %s", s.Where(), redactText(err.Error()))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
