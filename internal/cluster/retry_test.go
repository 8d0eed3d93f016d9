package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

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
	_, dialErr := net.Dial("tcp", closedAddr(t))
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

// closedAddr returns an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
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
	conf.Address = "http://" + closedAddr(t)
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
