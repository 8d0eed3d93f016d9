package variables

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

// fakeTimers is an AfterFunc whose timers fire only when the test says so.
type fakeTimers struct {
	mu     sync.Mutex
	timers []*fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
	fired   bool
}

func (ft *fakeTimers) AfterFunc(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	t := &fakeTimer{d: d, f: f}
	ft.timers = append(ft.timers, t)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := !t.stopped && !t.fired
		t.stopped = true
		return was
	}
}

// pending returns the durations of the timers that neither fired nor were stopped.
func (ft *fakeTimers) pending() []time.Duration {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	var out []time.Duration
	for _, t := range ft.timers {
		if !t.stopped && !t.fired {
			out = append(out, t.d)
		}
	}
	return out
}

// fireNext fires the oldest pending timer and reports its duration.
func (ft *fakeTimers) fireNext(t *testing.T) time.Duration {
	t.Helper()
	ft.mu.Lock()
	var next *fakeTimer
	for _, x := range ft.timers {
		if !x.stopped && !x.fired {
			next = x
			break
		}
	}
	if next == nil {
		ft.mu.Unlock()
		t.Fatal("no pending timer to fire")
	}
	next.fired = true
	ft.mu.Unlock()
	next.f()
	return next.d
}

type env struct {
	store  *Store
	acl    *acl.ACL
	idx    *index.Index
	timers *fakeTimers
	srv    *httptest.Server
	client *api.Client
}

func newEnv(t *testing.T, aclEnabled bool) *env {
	t.Helper()
	idx := index.New(10)
	a := acl.New(aclEnabled, idx)
	ft := &fakeTimers{}
	st := New(Config{Index: idx, Now: time.Now, ACL: a, AfterFunc: ft.AfterFunc})
	mux := http.NewServeMux()
	mux.Handle("/v1/var/", st.Handler())
	mux.Handle("/v1/vars", st.Handler())
	mux.Handle("/v1/acl/", a.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	return &env{store: st, acl: a, idx: idx, timers: ft, srv: srv, client: testhttp.NomadClient(t, srv.URL, a.BootstrapSecret())}
}

type rawResponse struct {
	status int
	header http.Header
	body   string
}

// do sends a raw request, for what the api client hides: codes, headers, bodies.
func (e *env) do(t *testing.T, method, path, body, token string) rawResponse {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := testhttp.Exchange(context.Background(), nil, method, e.srv.URL+path, rd, map[string]string{"X-Nomad-Token": token})
	if err != nil {
		t.Fatal(err)
	}
	return rawResponse{status: r.Status, header: r.Header, body: string(r.Body)}
}
