package simtest

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// Inflight is an http.RoundTripper that counts what an api client sends Nomad: the blocking
// queries (a GET with ?index=, which holds its connection until its body is closed) open
// now and the most open at once, the listings of variables and the plain reads of one. A
// test may have it answer requests instead of Nomad (SetFail).
type Inflight struct {
	next http.RoundTripper

	mu   sync.Mutex
	fail func(*http.Request) *http.Response
	n    InflightCounts
}

// InflightCounts are what an Inflight counted.
type InflightCounts struct {
	Blocking int // blocking queries open now
	Peak     int // the most blocking queries open at once
	Lists    int // GET /v1/vars, blocking or not, those SetFail's function answered too
	Reads    int // GET /v1/var/<path> without ?index=
}

// NewInflight returns an Inflight that sends requests on through next.
func NewInflight(next http.RoundTripper) *Inflight { return &Inflight{next: next} }

// TrackedClient is an api client of c, with token, whose requests go through an Inflight.
func TrackedClient(t testing.TB, c *nomadsim.Cluster, token string) (*api.Client, *Inflight) {
	t.Helper()
	tr := NewInflight(http.DefaultTransport)
	return ClientVia(t, c, token, tr), tr
}

func (c *Inflight) RoundTrip(r *http.Request) (*http.Response, error) {
	blocking := r.Method == http.MethodGet && r.URL.Query().Get("index") != ""
	c.mu.Lock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/vars":
		c.n.Lists++
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/var/") && !blocking:
		c.n.Reads++
	}
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		if resp := fail(r); resp != nil {
			return resp, nil
		}
	}
	if !blocking {
		return c.next.RoundTrip(r)
	}
	c.mu.Lock()
	c.n.Blocking++
	c.n.Peak = max(c.n.Peak, c.n.Blocking)
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		c.done()
		return nil, err
	}
	resp.Body = &closeHook{ReadCloser: resp.Body, onClose: c.done}
	return resp, nil
}

func (c *Inflight) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n.Blocking--
}

// Counts returns what c counted so far.
func (c *Inflight) Counts() InflightCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Reset starts the counts over: the peak from the blocking queries open now, the lists and
// reads from 0.
func (c *Inflight) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = InflightCounts{Blocking: c.n.Blocking, Peak: c.n.Blocking}
}

// SetFail has f answer each request first: a response it returns goes back to the client
// instead of Nomad's; nil lets the request through. SetFail(nil) lets every request
// through again.
func (c *Inflight) SetFail(f func(*http.Request) *http.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = f
}

// StatusAnswer is a response of status code with no body, for a SetFail function to return.
func StatusAnswer(r *http.Request, code int) *http.Response {
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: r, Header: http.Header{}}
}

// closeHook calls onClose once, when its body is closed.
type closeHook struct {
	io.ReadCloser
	once    sync.Once
	onClose func()
}

func (h *closeHook) Close() error {
	err := h.ReadCloser.Close()
	h.once.Do(h.onClose)
	return err
}
