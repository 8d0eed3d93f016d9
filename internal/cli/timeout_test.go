package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The commands facing a server that accepts connections and never answers, or where
// something else than the API answers: each ends (within the test's own bound, never
// timed here) with exit 1 and one line naming the address and the fix.

// holdServer is a server that accepts every request and answers none until the test ends.
func holdServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: let the held requests go
	return srv
}

// answerServer answers every request with the content type and body given, and /v1/status/
// leader (when leader is set) as Nomad does; the rest it holds until the test ends when
// hold is set.
func answerServer(t *testing.T, contentType, body string, leader, hold bool) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case leader && r.URL.Path == "/v1/status/leader":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`"127.0.0.1:4647"`))
		case hold:
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			w.Header().Set("Content-Type", contentType)
			_, _ = w.Write([]byte(body))
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv
}

// endsRefused runs the command and checks that it ended with exit 1 and exactly want on
// stderr (one line). The test's bound only says whether it ended at all.
func endsRefused(t *testing.T, e cliEnv, want string, args ...string) {
	t.Helper()
	ctx := testCtx(t)
	select {
	case r := <-e.start(ctx, args...):
		if r.code != 1 || r.err != want+"\n" {
			t.Fatalf("%s: exit %d\nstderr: %q\nwant:   %q\nstdout:\n%s", strings.Join(args, " "), r.code, r.err, want+"\n", r.out)
		}
	case <-ctx.Done():
		t.Fatalf("%s did not end", strings.Join(args, " "))
	}
}

// TestNomadThatNeverAnswers: NOMAD_ADDR at a server that accepts connections and never
// answers; the timeout from the flag or the environment.
func TestNomadThatNeverAnswers(t *testing.T) {
	srv := holdServer(t)
	e := cliEnv{addr: srv.URL, localDir: t.TempDir()}
	want := "Nomad at " + srv.URL + " did not answer within 200ms; check -address or NOMAD_ADDR, or raise -request-timeout"
	endsRefused(t, e, want, "status", "-request-timeout=200ms")
	endsRefused(t, e, want, "status", "-request-timeout=200ms", "3f2a")
	endsRefused(t, e, want, "run", "-on-error=fail", "-request-timeout=200ms", "web")
	endsRefused(t, e, want, "schedules", "-request-timeout=200ms")

	e.env = map[string]string{"NOMAD_RESTART_REQUEST_TIMEOUT": "200ms"}
	endsRefused(t, e, want, "status")
	endsRefused(t, e, want, "watches")
	// The flag wins over the environment.
	endsRefused(t, e, strings.Replace(want, "200ms", "300ms", 1), "status", "-request-timeout=300ms")
}

// TestNomadThatStopsAnswering: Nomad answers whether it is up, then never again: the read
// that gets no answer is tried three times, and says so.
func TestNomadThatStopsAnswering(t *testing.T) {
	srv := answerServer(t, "", "", true, true)
	e := cliEnv{addr: srv.URL, localDir: t.TempDir()}
	want := "Nomad at " + srv.URL + " did not answer within 200ms (3 tries); check -address or NOMAD_ADDR, or raise -request-timeout"
	endsRefused(t, e, want, "status", "-request-timeout=200ms")
	endsRefused(t, e, want, "status", "-state=nomad", "-request-timeout=200ms")
	endsRefused(t, e, want, "run", "-on-error=fail", "-request-timeout=200ms", "web")
}

// TestSomethingElseAnswersForNomad: a proxy's login page, a plain-text 200 and another
// service's JSON at NOMAD_ADDR are named for what they are.
func TestSomethingElseAnswersForNomad(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
		leader                        bool
	}{
		{name: "a login page", contentType: "text/html; charset=utf-8",
			body: "<html><head><title>Login</title></head><body>Sign in</body></html>",
			want: ` answered with text/html ("<html><head><title>Login</title></head><"...), not Nomad's API; check -address or NOMAD_ADDR`},
		{name: "a plain-text 200", contentType: "text/plain", body: "OK\n",
			want: ` answered with text/plain ("OK"), not Nomad's API; check -address or NOMAD_ADDR`},
		{name: "another service's JSON", contentType: "application/json", body: `{"status":"ok"}`,
			want: ` answered with application/json ("{\"status\":\"ok\"}"), not Nomad's API (json: cannot unmarshal object into Go value of type string); check -address or NOMAD_ADDR`},
		// Past the first request: the Variables API's listing answered with another shape.
		{name: "JSON of another shape", contentType: "application/json", body: `{"Items":[]}`, leader: true,
			want: ` answered with application/json ("{\"Items\":[]}"), not Nomad's API (json: cannot unmarshal object into Go value of type []*api.VariableMetadata); check -address or NOMAD_ADDR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := answerServer(t, tc.contentType, tc.body, tc.leader, false)
			e := cliEnv{addr: srv.URL, localDir: t.TempDir()}
			endsRefused(t, e, srv.URL+tc.want, "status", "-state=nomad")
			endsRefused(t, e, srv.URL+tc.want, "status")
		})
	}
}

// TestConsulAndPrometheusThatNeverAnswer: the health gate's Consul and the metric gates'
// Prometheus at servers that never answer are refused before anything changes, in one
// line naming their address.
func TestConsulAndPrometheusThatNeverAnswer(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	register(t, c, checkedJob("checked", 2, "pass", time.Second, time.Minute))
	register(t, c, simpleJob("web", api.JobTypeService, 1))
	e := newCLIEnv(t, c)
	ctx := testCtx(t)

	consul := holdServer(t)
	runRefused(t, ctx, e, c, true,
		"Consul at "+consul.URL+" did not answer within 300ms; check -consul-address or CONSUL_HTTP_ADDR, or raise -request-timeout",
		"run", "-on-error=fail", "-request-timeout=300ms", "-consul-address="+consul.URL, "checked")

	html := answerServer(t, "text/html", "<html><title>Sign in</title></html>", false, false)
	runRefused(t, ctx, e, c, true,
		html.URL+` answered with text/html ("<html><title>Sign in</title></html>"), not Consul's API; check -consul-address or CONSUL_HTTP_ADDR`,
		"run", "-on-error=fail", "-consul-address="+html.URL, "checked")

	prom := holdServer(t)
	runRefused(t, ctx, e, c, true,
		`gate "e": its query failed: Prometheus at `+prom.URL+" did not answer within 300ms; check -prometheus-address, or raise -request-timeout",
		"run", "-state=local", "-yes", "-request-timeout=300ms", "-prometheus-address", prom.URL, "-gate", "e: x < 1", "web")
}
