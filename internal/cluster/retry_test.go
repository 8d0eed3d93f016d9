package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// codedAnswer is an error that says its HTTP status without the api module's type, as an
// in-memory cluster's answers do.
func codedAnswer(code int, body string) error {
	return simtest.Answer{Status: code, Text: body}
}

// nomadAnswer obtains the api client's error for a Nomad answer of code and text.
func nomadAnswer(t *testing.T, code int, text string) error {
	t.Helper()
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, code, text) })
	_, _, err := n.client.Jobs().Info("x", nil)
	if err == nil {
		t.Fatal("no error")
	}
	return err
}

func TestIsTransient(t *testing.T) {
	_, dialErr := net.Dial("tcp", simtest.ClosedAddr(t))
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", dialErr, true},
		{"wrapped refused", fmt.Errorf("reading: %w", &url.Error{Op: "Get", URL: "x", Err: dialErr}), true},
		{"cut answer", io.ErrUnexpectedEOF, true},
		{"canceled", fmt.Errorf("reading: %w", context.Canceled), false},
		{"deadline", &url.Error{Op: "Get", URL: "x", Err: context.DeadlineExceeded}, false},
		{"decoding", errors.New("invalid character 'x'"), false},
		{"refused errno", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"reset errno", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"cut body", fmt.Errorf("decoding: %w", io.EOF), true},
		{"no leader as text", errors.New("rpc error: No cluster leader"), true},
		{"coded 500", codedAnswer(500, "No cluster leader"), true},
		{"coded 404", codedAnswer(404, "alloc not found"), false},
		{"coded 500 task not running", codedAnswer(500, "Task not running"), false},
		{"alloc not found over a 500", &kindError{kind: ErrAllocNotFound, err: codedAnswer(500, "x")}, false},
		{"denied over a 500", fmt.Errorf("x: %w", &kindError{kind: ErrPermissionDenied, err: codedAnswer(500, "x")}), false},
		{"placement failure", fmt.Errorf("x: %w: %w", restart.ErrPlacementFailure, io.ErrUnexpectedEOF), false},
		{"no answer in time", &url.Error{Op: "Get", URL: "x", Err: &upstream.NoAnswerError{Service: "Nomad"}}, true},
		{"answer stopped", fmt.Errorf("decoding: %w", &upstream.NoAnswerError{Service: "Nomad", Stalled: true}), true},
		{"another service's page", &url.Error{Op: "Get", URL: "x", Err: &upstream.NotAPIError{Status: 200}}, false},
		{"another service's 404 page", &url.Error{Op: "Get", URL: "x", Err: &upstream.NotAPIError{Status: 404}}, false},
		{"a proxy's 502 page", &url.Error{Op: "Get", URL: "x", Err: &upstream.NotAPIError{Status: 502}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTransient(tc.err); got != tc.want {
				t.Fatalf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if !notSent(dialErr) || notSent(io.ErrUnexpectedEOF) || notSent(nomadAnswer(t, 500, "No cluster leader")) {
		t.Fatal("only a failed dial proves a request was not sent")
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second}
	for attempt, full := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		full *= time.Millisecond
		if attempt >= 4 {
			full = time.Second
		}
		for range 50 {
			d := p.backoff(attempt)
			if d < full/2 || d > full {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, full/2, full)
			}
		}
	}
	if d := p.backoff(1000); d > time.Second {
		t.Fatalf("huge attempt: %v", d)
	}
}

func TestWritesResendOnlyWhatWasNotSent(t *testing.T) {
	conf := api.DefaultConfig()
	conf.Address = "http://" + simtest.ClosedAddr(t)
	client, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	n := NewNomadWithOptions(client, Options{Retry: RetryPolicy{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxElapsed: 20 * time.Millisecond}})
	err = n.RestartTasks(context.Background(), "a1", "", false)
	if err == nil || !IsTransient(err) || !notSent(err) {
		t.Fatalf("got %v", err)
	}
	var attempts int
	if _, scanErr := fmt.Sscanf(afterGaveUp(err.Error()), "%d attempts", &attempts); scanErr != nil || attempts < 2 {
		t.Fatalf("a refused connection should be retried even for a write: %v", err)
	}
}

func afterGaveUp(s string) string {
	const marker = "gave up after "
	for i := 0; i+len(marker) <= len(s); i++ {
		if s[i:i+len(marker)] == marker {
			return s[i+len(marker):]
		}
	}
	return ""
}

// engineCoded is an error with a status code only, as the engine's former transient rule
// was tested with.
type engineCoded struct{ code int }

func (c engineCoded) Error() string   { return fmt.Sprintf("Unexpected response code: %d", c.code) }
func (c engineCoded) StatusCode() int { return c.code }

// TestTransient is the engine's former rule's table (moved from internal/engine, whose
// transient is now IsTransient): what it decided, IsTransient decides.
func TestTransient(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("reading allocation: %w", ErrAllocNotFound), false},
		{fmt.Errorf("x: %w", ErrPermissionDenied), false},
		{fmt.Errorf("x: %w", restart.ErrPlacementFailure), false},
		{errors.New("Unexpected response code: 500 (Task not running)"), false},
		{errors.New("Unexpected response code: 500 (restart of an alloc that should not run)"), false},
		{errors.New("Unexpected response code: 500 (No cluster leader)"), true},
		{errors.New("Unexpected response code: 503 (overloaded)"), true},
		{fmt.Errorf("x: %w", engineCoded{502}), true},
		{fmt.Errorf("x: %w", engineCoded{429}), true},
		{fmt.Errorf("x: %w", engineCoded{400}), false},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{errors.New("something else"), false},
	}
	for _, tc := range cases {
		if got := IsTransient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestBackoffGivesUp: a Backoff waits while its policy's time lasts and ctx lives, and starts
// over after Reset.
func TestBackoffGivesUp(t *testing.T) {
	b := NewBackoff(RetryPolicy{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, MaxElapsed: 40 * time.Millisecond})
	ctx := context.Background()
	waits := 0
	for b.Wait(ctx) {
		waits++
		if waits > 100 {
			t.Fatal("never gave up")
		}
	}
	if waits == 0 {
		t.Fatal("gave up before the first wait")
	}
	b.Reset()
	if !b.Wait(ctx) {
		t.Fatal("no wait after Reset")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if NewBackoff(RetryPolicy{Initial: time.Second}).Wait(canceled) {
		t.Fatal("waited on an ended context")
	}
}

// TestRetrySilentTries: a read whose requests get no answer is tried SilentTries times, and
// its error says so, in its one line.
func TestRetrySilentTries(t *testing.T) {
	p := RetryPolicy{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxElapsed: time.Minute, SilentTries: 3}
	sent := 0
	_, err := Retry(context.Background(), p, nil, "reading", func(context.Context) (int, error) {
		sent++
		return 0, &url.Error{Op: "Get", URL: "x", Err: &upstream.NoAnswerError{Service: "Nomad", Address: "http://n", Setting: "NOMAD_ADDR", After: time.Second}}
	})
	if sent != 3 {
		t.Fatalf("sent %d requests, want 3", sent)
	}
	ue, ok := upstream.Find(err)
	if !ok || ue.Error() != "Nomad at http://n did not answer within 1s (3 tries); check NOMAD_ADDR, or raise -request-timeout" {
		t.Fatalf("got %v", err)
	}

	// Other transient failures are retried for MaxElapsed, as before.
	sent = 0
	p.MaxElapsed = 50 * time.Millisecond
	_, err = Retry(context.Background(), p, nil, "reading", func(context.Context) (int, error) {
		sent++
		return 0, fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	})
	if sent <= 3 || err == nil {
		t.Fatalf("a refused connection: sent %d, %v", sent, err)
	}
}

// TestClientFacesSilenceAndOtherAnswers drives the cluster's reads, through the client
// NewClient builds, against a server that never answers, one that answers with a proxy's
// page, and one that answers with JSON of another shape.
func TestClientFacesSilenceAndOtherAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(h func(w http.ResponseWriter, r *http.Request, release <-chan struct{})) (*Nomad, *atomic.Int32, string) {
		release := make(chan struct{})
		var requests atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			h(w, r, release)
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		client, err := NewClient(ClientConfig{Address: srv.URL, RequestTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return NewNomadWithOptions(client, Options{Retry: RetryPolicy{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxElapsed: time.Minute}}), &requests, srv.URL
	}

	n, requests, addr := start(func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	_, err := n.Allocation(ctx, "a1")
	want := "Nomad at " + addr + " did not answer within 100ms (3 tries); check -address or NOMAD_ADDR, or raise -request-timeout"
	if ue, ok := upstream.Find(err); !ok || ue.Error() != want || requests.Load() != 3 {
		t.Fatalf("a silent server: %v after %d requests\nwant %s after 3", err, requests.Load(), want)
	}

	n, requests, addr = start(func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html><title>Not here</title></html>"))
	})
	_, err = n.Allocation(ctx, "a1")
	want = addr + ` answered 404 with text/html ("<html><title>Not here</title></html>"), not Nomad's API; check -address or NOMAD_ADDR`
	if ue, ok := upstream.Find(err); !ok || ue.Error() != want || requests.Load() != 1 || errors.Is(err, ErrAllocNotFound) {
		t.Fatalf("another server's 404 page: %v after %d requests\nwant %s, once, not an unknown allocation", err, requests.Load(), want)
	}

	n, _, addr = start(func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`["not", "an", "allocation"]`))
	})
	_, err = n.Allocation(ctx, "a1")
	want = addr + ` answered with application/json ("[\"not\", \"an\", \"allocation\"]"), not Nomad's API (json: cannot unmarshal array into Go value of type api.Allocation); check -address or NOMAD_ADDR`
	if ue, ok := upstream.Find(err); !ok || ue.Error() != want {
		t.Fatalf("JSON of another shape: %v\nwant %s", err, want)
	}
}
