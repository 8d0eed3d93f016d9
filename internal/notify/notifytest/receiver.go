// Package notifytest is test support for the tests that send notifications: a local HTTP
// endpoint standing for a webhook (generic, Slack's or Teams'), which keeps what it is
// sent and answers as the test asks. It is imported by tests only.
package notifytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Secret is the secret part of the receivers' URLs (as a Slack hook's path is): no output,
// log or record may show it.
const Secret = "T0SECRET0B0"

// Answer is how a Receiver answers what it takes.
type Answer struct {
	Status int  // the status of a request taken; 0: 200 OK
	Hang   bool // never answer (until the request or the test ends), as a sink that hangs
	// Check is the service's format: a body it refuses is answered 400 and reported by
	// Received; nil takes any JSON.
	Check func(body map[string]any) error
}

// Receiver keeps every JSON body POSTed to it, in order.
type Receiver struct {
	t      testing.TB
	srv    *httptest.Server
	answer Answer

	mu     sync.Mutex
	bodies []map[string]any
	raw    []string
	errs   []string
	got    chan struct{}
}

// NewReceiver starts a receiver that answers as a says, closed when the test ends.
func NewReceiver(t testing.TB, a Answer) *Receiver {
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	r := &Receiver{t: t, answer: a, got: make(chan struct{}, 1000)}
	done := make(chan struct{})
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		err := r.take(raw, req.Header.Get("Content-Type"))
		if r.answer.Hang {
			select {
			case <-req.Context().Done():
			case <-done:
			}
			return
		}
		if err != nil {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		w.WriteHeader(r.answer.Status)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(func() { close(done); r.srv.Close() })
	return r
}

// take keeps a body and says whether the service would refuse it.
func (r *Receiver) take(raw []byte, contentType string) error {
	var body map[string]any
	err := json.Unmarshal(raw, &body)
	if err == nil && contentType != "application/json" {
		err = fmt.Errorf("content type %q", contentType)
	}
	if err == nil && r.answer.Check != nil {
		err = r.answer.Check(body)
	}
	r.mu.Lock()
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%v: %s", err, raw))
	}
	r.bodies = append(r.bodies, body)
	r.raw = append(r.raw, string(raw))
	r.mu.Unlock()
	r.got <- struct{}{}
	return err
}

// URL is the receiver's address with a path of its own under it.
func (r *Receiver) URL(path string) string { return r.srv.URL + path }

// SecretURL is the receiver's address with Secret in its path, as a webhook's URL carries
// its token.
func (r *Receiver) SecretURL() string { return r.srv.URL + "/hooks/" + Secret }

// Handler serves as the receiver does (for a test's endpoint that passes some requests on).
func (r *Receiver) Handler() http.Handler { return r.srv.Config.Handler }

// Received is a copy of the bodies taken so far; it fails the test for a body the
// service would have refused.
func (r *Receiver) Received() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		r.t.Errorf("bodies the service would refuse: %s", strings.Join(r.errs, "\n"))
		r.errs = nil
	}
	return append([]map[string]any(nil), r.bodies...)
}

// Raw are the bodies taken so far as they came, one a line (to check against a schema).
func (r *Receiver) Raw() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.raw, "\n")
}

// Triggers are the trigger fields of the generic bodies taken so far, in order.
func (r *Receiver) Triggers() []string {
	var out []string
	for _, b := range r.Received() {
		s, _ := b["trigger"].(string)
		out = append(out, s)
	}
	return out
}

// WaitFor waits until the receiver holds a body that ok accepts, and returns it.
func (r *Receiver) WaitFor(ctx context.Context, what string, ok func(map[string]any) bool) map[string]any {
	r.t.Helper()
	for {
		for _, b := range r.Received() {
			if ok(b) {
				return b
			}
		}
		select {
		case <-r.got:
		case <-ctx.Done():
			r.t.Fatalf("the receiver got no %s; it got %v", what, r.Received())
		}
	}
}
