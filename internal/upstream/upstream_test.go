package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testTimeout bounds each test's own waits: generous, the machine is shared.
const testTimeout = 30 * time.Second

// serve starts a server of h for the test; requests it holds are let go when the test
// ends (before the server closes, which waits for them).
func serve(t *testing.T, h func(w http.ResponseWriter, r *http.Request, release <-chan struct{})) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, release) }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv
}

// hold keeps a request unanswered until the test ends or the client goes.
func hold(_ http.ResponseWriter, r *http.Request, release <-chan struct{}) {
	select {
	case <-release:
	case <-r.Context().Done():
	}
}

func guarded(target Target) *http.Client {
	return &http.Client{Transport: Guard(http.DefaultTransport.(*http.Transport).Clone(), target)}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func get(ctx context.Context, t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

// TestGuardClassifiesAnswers: the answers that are not the API's are refused with one line
// naming the address and what answered; the API's own, errors included, pass untouched.
func TestGuardClassifiesAnswers(t *testing.T) {
	login := `<html><head><title>Login</title></head><body>Sign in to continue</body></html>`
	for _, tc := range []struct {
		name        string
		path        string
		status      int
		contentType string // "-": none at all
		body        string
		gzip        bool
		want        string // "" passes; else the NotAPIError's text
		temporary   bool
	}{
		{name: "JSON", path: "/v1/jobs", status: 200, contentType: "application/json", body: `[]`},
		{name: "Nomad's plain-text error", path: "/v1/job/x", status: 404, contentType: "text/plain; charset=utf-8", body: "job not found"},
		{name: "no content", path: "/v1/var/x", status: 204, contentType: "-"},
		{name: "JSON without a content type", path: "/v1/jobs", status: 200, contentType: "-", body: ` {"a":1}`},
		{name: "a raw file", path: "/v1/client/fs/cat/abc", status: 200, contentType: "text/plain", body: "hello"},
		{name: "JSON labelled as text", path: "/v1/jobs", status: 200, contentType: "text/plain; charset=utf-8", body: `[{"ID":"web"}]`},
		{name: "a login page", path: "/v1/status/leader", status: 200, contentType: "text/html; charset=utf-8", body: login,
			want: `answered with text/html ("<html><head><title>Login</title></head><"...), not Nomad's API; check -address or NOMAD_ADDR`},
		{name: "a gzipped login page", path: "/v1/status/leader", status: 200, contentType: "text/html", body: login, gzip: true,
			want: `answered with text/html ("<html><head><title>Login</title></head><"...), not Nomad's API`},
		{name: "a plain-text 200", path: "/v1/status/leader", status: 200, contentType: "text/plain; charset=utf-8", body: "OK\n",
			want: `answered with text/plain ("OK"), not Nomad's API`},
		{name: "text without a content type", path: "/v1/jobs", status: 200, contentType: "-", body: "hello there",
			want: `answered with no content type ("hello there"), not Nomad's API`},
		{name: "a proxy's 401 page", path: "/v1/jobs", status: 401, contentType: "text/html", body: "<h1>Unauthorized</h1>",
			want: `answered 401 with text/html ("<h1>Unauthorized</h1>"), not Nomad's API`},
		{name: "a proxy's 502 page", path: "/v1/jobs", status: 502, contentType: "text/html", body: "<h1>Bad Gateway</h1>",
			want: `answered 502 with text/html ("<h1>Bad Gateway</h1>"), not Nomad's API`, temporary: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
				body := []byte(tc.body)
				if tc.gzip {
					var b bytes.Buffer
					zw := gzip.NewWriter(&b)
					_, _ = zw.Write(body)
					_ = zw.Close()
					body = b.Bytes()
					w.Header().Set("Content-Encoding", "gzip")
				}
				if tc.contentType == "-" {
					w.Header()["Content-Type"] = nil // no sniffing either
				} else {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write(body)
			})
			c := guarded(Nomad(srv.URL, time.Minute))
			resp, err := get(testCtx(t), t, c, srv.URL+tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want the answer passed on, got %v", err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil || string(b) != tc.body || resp.StatusCode != tc.status {
					t.Fatalf("answer passed on as %d %q (%v), want %d %q", resp.StatusCode, b, err, tc.status, tc.body)
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatalf("want %q, the answer was passed on", tc.want)
			}
			na, ok := errors.AsType[*NotAPIError](err)
			if !ok {
				t.Fatalf("want a NotAPIError, got %T %v", err, err)
			}
			if got := na.Error(); !strings.HasPrefix(got, srv.URL+" ") || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q after the address", got, tc.want)
			}
			if na.Temporary() != tc.temporary {
				t.Errorf("Temporary() = %v, want %v", na.Temporary(), tc.temporary)
			}
		})
	}
}

// TestGuardNoAnswer: a server that accepts the connection and never answers fails the
// request with one line naming the address, the bound and the fix.
func TestGuardNoAnswer(t *testing.T) {
	srv := serve(t, hold)
	c := guarded(Nomad(srv.URL, 50*time.Millisecond))
	_, err := get(testCtx(t), t, c, srv.URL+"/v1/jobs")
	na, ok := errors.AsType[*NoAnswerError](err)
	if !ok {
		t.Fatalf("want a NoAnswerError, got %T %v", err, err)
	}
	want := "Nomad at " + srv.URL + " did not answer within 50ms; check -address or NOMAD_ADDR, or raise -request-timeout"
	if na.Error() != want {
		t.Errorf("got %q\nwant %q", na.Error(), want)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("want a net.Error that timed out, got %v", err)
	}
	na.Tries = 3
	if got := na.Error(); !strings.Contains(got, "did not answer within 50ms (3 tries);") {
		t.Errorf("with tries: %q", got)
	}
}

// TestGuardCallerCancelWins: a request whose caller gave up ends with the caller's error,
// not a NoAnswerError.
func TestGuardCallerCancelWins(t *testing.T) {
	srv := serve(t, hold)
	c := guarded(Nomad(srv.URL, time.Hour))
	ctx, cancel := context.WithCancel(testCtx(t))
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err := get(ctx, t, c, srv.URL+"/v1/jobs")
	if _, ok := Find(err); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("want the caller's cancel, got %v", err)
	}
}

// TestGuardStalledAnswer: an answer that begins and then stops fails its read.
func TestGuardStalledAnswer(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[{"ID":`))
		w.(http.Flusher).Flush()
		hold(w, r, release)
	})
	c := guarded(Nomad(srv.URL, 50*time.Millisecond))
	resp, err := get(testCtx(t), t, c, srv.URL+"/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	na, ok := errors.AsType[*NoAnswerError](err)
	if !ok || !na.Stalled || !strings.Contains(na.Error(), "stopped answering for 50ms") {
		t.Fatalf("want a stalled NoAnswerError, got %T %v", err, err)
	}
}

// TestGuardBounds: what each kind of request is given to begin its answer.
func TestGuardBounds(t *testing.T) {
	nomad := &guard{t: Nomad("http://n", 10*time.Second)}
	consul := &guard{t: Consul("http://c", 10*time.Second)}
	prom := &guard{t: Prometheus("http://p", 10*time.Second)}
	req := func(method, url string) *http.Request {
		r, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name         string
		g            *guard
		req          *http.Request
		answer, read time.Duration
	}{
		{"a read", nomad, req("GET", "http://n/v1/jobs"), 10 * time.Second, 10 * time.Second},
		{"a write", nomad, req("PUT", "http://n/v1/var/x?index=5"), 10 * time.Second, 10 * time.Second},
		{"index 0 does not block", nomad, req("GET", "http://n/v1/jobs?index=0&wait=300000ms"), 10 * time.Second, 10 * time.Second},
		// The api module sends waits in milliseconds: 300000ms + 1/16 + the timeout.
		{"a blocking query", nomad, req("GET", "http://n/v1/jobs?index=7&wait=300000ms"), 5*time.Minute + 18750*time.Millisecond + 10*time.Second, 10 * time.Second},
		{"Nomad's default wait", nomad, req("GET", "http://n/v1/jobs?index=7"), 5*time.Minute + 18750*time.Millisecond + 10*time.Second, 10 * time.Second},
		{"a wait past Nomad's cap", nomad, req("GET", "http://n/v1/jobs?index=7&wait=20m"), 5*time.Minute + 18750*time.Millisecond + 10*time.Second, 10 * time.Second},
		{"Consul's cap", consul, req("GET", "http://c/v1/kv/a?index=7&wait=20m"), 10*time.Minute + 37500*time.Millisecond + 10*time.Second, 10 * time.Second},
		{"the event stream", nomad, req("GET", "http://n/v1/event/stream?index=7&topic=Job"), 10 * time.Second, 30*time.Second + 20*time.Second},
		{"a Prometheus query", prom, req("POST", "http://p/api/v1/query"), 11 * time.Second, 10 * time.Second},
		{"an unbounded request", nomad, req("PUT", "http://n/v1/client/allocation/a/restart").WithContext(Unbounded(context.Background())), 0, 10 * time.Second},
	} {
		if got := tc.g.bounds(tc.req); got.answer != tc.answer || got.read != tc.read || (got.said != tc.answer && tc.g != prom) {
			t.Errorf("%s: bounds %+v, want answer %s read %s", tc.name, got, tc.answer, tc.read)
		}
	}
}

// TestGuardStreamOutlivesTimeout: a stream that keeps bringing heartbeats lives past the
// request timeout; once they stop, its read fails.
func TestGuardStreamOutlivesTimeout(t *testing.T) {
	const beat = 20 * time.Millisecond
	stop := make(chan struct{})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
		w.Header().Set("Content-Type", "application/json")
		tick := time.NewTicker(beat)
		defer tick.Stop()
		for {
			_, _ = w.Write([]byte("{}\n"))
			w.(http.Flusher).Flush()
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			case <-stop:
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			}
		}
	})
	target := Nomad(srv.URL, 500*time.Millisecond)
	target.Heartbeat = beat
	c := guarded(target)
	resp, err := get(testCtx(t), t, c, srv.URL+"/v1/event/stream?index=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	// 60 heartbeats take longer than the request timeout: a deadline would have cut them.
	for i := range 60 {
		var frame map[string]any
		if err := dec.Decode(&frame); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	close(stop)
	for {
		var frame map[string]any
		err := dec.Decode(&frame)
		if err == nil {
			continue // heartbeats written before the stop
		}
		if na, ok := errors.AsType[*NoAnswerError](err); !ok || !na.Stalled {
			t.Fatalf("a silent stream: want a stalled NoAnswerError, got %T %v", err, err)
		}
		return
	}
}

// TestGuardUnboundedWaits: a request marked Unbounded waits for its answer past the
// request timeout.
func TestGuardUnboundedWaits(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		time.Sleep(150 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"Index":0}`))
	})
	c := guarded(Nomad(srv.URL, 30*time.Millisecond))
	resp, err := get(Unbounded(testCtx(t)), t, c, srv.URL+"/v1/client/allocation/a/restart")
	if err != nil {
		t.Fatalf("want the late answer, got %v", err)
	}
	resp.Body.Close()
}

// TestExplainOtherJSON: JSON that is not the API's, which only the caller's decoding finds
// out, is named for what answered.
func TestExplainOtherJSON(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status": "ok",   "service": "billing"}`))
	})
	c := guarded(Consul(srv.URL, time.Minute))
	ctx := Record(testCtx(t))
	resp, err := get(ctx, t, c, srv.URL+"/v1/status/leader")
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	err = json.NewDecoder(resp.Body).Decode(&leader)
	resp.Body.Close()
	err = Explain(ctx, err)
	na, ok := errors.AsType[*NotAPIError](err)
	if !ok {
		t.Fatalf("want a NotAPIError, got %T %v", err, err)
	}
	want := srv.URL + ` answered with application/json ("{\"status\": \"ok\", \"service\": \"billing\"}"), not Consul's API (json: cannot unmarshal object into Go value of type string); check -consul-address or CONSUL_HTTP_ADDR`
	if na.Error() != want {
		t.Errorf("got  %q\nwant %q", na.Error(), want)
	}
	if na.Temporary() {
		t.Error("another service's answer is not temporary")
	}

	// Errors that are not about decoding, and contexts that recorded nothing, are left.
	other := errors.New("connection reset")
	if got := Explain(ctx, other); got != other {
		t.Errorf("Explain changed %v into %v", other, got)
	}
	if got := Explain(context.Background(), err); got != err {
		t.Errorf("without a recorder: %v", got)
	}
}

// TestQuote: what a message quotes of an answer.
func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  \n ", ""},
		{"OK\n", `"OK"`},
		{"<html>\n  <head>\t<title>Login</title>", `"<html> <head> <title>Login</title>"`},
		{strings.Repeat("a", 41), `"` + strings.Repeat("a", 40) + `"...`},
		{"caf\xe9", `"caf?"`},
	} {
		if got := quote([]byte(tc.in), ""); got != tc.want {
			t.Errorf("quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
