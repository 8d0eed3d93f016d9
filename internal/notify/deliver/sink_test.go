package deliver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/notify"
)

const secret = "T000/B000/XXXXsecretXXXX"

func TestRedactShowsSchemeAndHostOnly(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/" + secret:        "https://hooks.slack.com/…",
		"slack+https://hooks.slack.com/services/" + secret:  "slack+https://hooks.slack.com/…",
		"telegram://123:XXXXsecretXXXX@telegram?chats=@ops": "telegram://…",
		"https://example.com":                               "https://example.com",
		"::nope":                                            "<a URL that does not parse>",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSinkErrorsNeverCarryTheURL: what a refused URL, a failed POST or a refusing service
// say names where, never the secret part.
func TestSinkErrorsNeverCarryTheURL(t *testing.T) {
	for _, u := range []string{"nosuchservice://" + secret, "slack+ftp://x/" + secret, "discord://" + secret} {
		if _, err := NewSink(u, http.DefaultClient, 0); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("NewSink(%q) says the secret: %v", u, err)
		}
	}
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no_service", http.StatusNotFound)
	}))
	defer refusing.Close()
	for _, u := range []string{refusing.URL + "/services/" + secret, "http://127.0.0.1:1/services/" + secret} {
		s, err := NewSink(u, http.DefaultClient, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), notify.TestMessage("ops", time.Now()))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("sending to %s: %v, want an error without the secret", Redact(u), err)
		}
	}
	if _, err := NewSink("discord://token@webhookid", http.DefaultClient, 0); err != nil {
		t.Errorf("a shoutrrr service URL was refused: %v", err)
	}
}

// TestShoutrrrErrorsNeverCarryTheServiceURL: a shoutrrr service fails with its own HTTP
// client's error, which quotes the URL it posted to (the service's API, the token in its
// path), not the shoutrrr URL it was given: that one is redacted too.
func TestShoutrrrErrorsNeverCarryTheServiceURL(t *testing.T) {
	s, err := NewSink("generic://127.0.0.1:1/hooks/"+secret+"?disabletls=yes", http.DefaultClient, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(context.Background(), notify.TestMessage("ops", time.Now()))
	if err == nil || strings.Contains(err.Error(), "XXXXsecretXXXX") {
		t.Errorf("sending through shoutrrr: %v, want an error without the secret", err)
	}
}
