package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
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
		{"no leader", nomadAnswer(t, 500, "No cluster leader"), true},
		{"bad gateway", nomadAnswer(t, 502, "bad gateway"), true},
		{"too many requests", nomadAnswer(t, 429, "slow down"), true},
		{"rpc error", nomadAnswer(t, 500, "rpc error: EOF"), true},
		{"not found", nomadAnswer(t, 404, "job not found"), false},
		{"denied", nomadAnswer(t, 403, "Permission denied"), false},
		{"bad request", nomadAnswer(t, 400, "Invalid index"), false},
		{"task not running", nomadAnswer(t, 500, "Task not running"), false},
		{"connection refused", dialErr, true},
		{"wrapped refused", fmt.Errorf("reading: %w", &url.Error{Op: "Get", URL: "x", Err: dialErr}), true},
		{"cut answer", io.ErrUnexpectedEOF, true},
		{"canceled", fmt.Errorf("reading: %w", context.Canceled), false},
		{"deadline", &url.Error{Op: "Get", URL: "x", Err: context.DeadlineExceeded}, false},
		{"decoding", errors.New("invalid character 'x'"), false},
		{"unavailable", nomadAnswer(t, 503, "service unavailable"), true},
		{"gateway timeout", nomadAnswer(t, 504, "gateway timeout"), true},
		{"unknown allocation", nomadAnswer(t, 500, "Unknown allocation \"x\""), false},
		{"should not run", nomadAnswer(t, 500, "restart of an alloc that should not run"), false},
		{"acl token not found", nomadAnswer(t, 403, "ACL token not found"), false},
		{"conflict", nomadAnswer(t, 409, "check-and-set failed"), false},
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
