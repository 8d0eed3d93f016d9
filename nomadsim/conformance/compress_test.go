package conformance

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Nomad's agent compresses its answers (gorilla/handlers.CompressHandler around its whole
// mux): whatever their size, type or status, when Accept-Encoding names gzip or deflate,
// always with "Vary: Accept-Encoding"; the event stream alone goes uncompressed. The
// official api client asks for gzip, so the bytes a driver costs depend on it.

// encoded is an answer read with a given Accept-Encoding, its body as sent.
type encoded struct {
	rawResponse
	accept string
}

// getEncoded sends a request with the given Accept-Encoding ("" for none) on the raw
// client, which neither asks for compression nor undoes it.
func (tg *target) getEncoded(t *testing.T, method, path, accept string, body []byte) encoded {
	t.Helper()
	r, err := sendRaw(tg.ctx(t), tg.http, method, tg.addr+path, bytes.NewReader(body), map[string]string{"Accept-Encoding": accept, "X-Nomad-Token": tg.token})
	if err != nil {
		t.Fatal(err)
	}
	return encoded{r, accept}
}

// decoded checks the answer's compression headers against want ("" for none) and returns
// its body decoded.
func (e encoded) decoded(t *testing.T, what, want string) []byte {
	t.Helper()
	if got := e.header.Get("Content-Encoding"); got != want {
		t.Errorf("%s with Accept-Encoding %q: Content-Encoding %q, want %q", what, e.accept, got, want)
	}
	if got := e.header.Values("Vary"); len(got) == 0 || got[0] != "Accept-Encoding" {
		t.Errorf("%s with Accept-Encoding %q: Vary %q, want Accept-Encoding first", what, e.accept, got)
	}
	if cl := e.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(e.body)) {
		t.Errorf("%s with Accept-Encoding %q: Content-Length %s for a body of %d bytes", what, e.accept, cl, len(e.body))
	}
	var r io.Reader
	switch e.header.Get("Content-Encoding") {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(e.body))
		if err != nil {
			t.Fatalf("%s: gzip header: %v", what, err)
		}
		r = zr
	case "deflate":
		r = flate.NewReader(bytes.NewReader(e.body))
	default:
		return e.body
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s with Accept-Encoding %q: body does not decode: %v", what, e.accept, err)
	}
	return b
}

// acceptCases are the Accept-Encoding headers sent and the encoding Nomad answers with: the
// first token that is exactly gzip or deflate; none for a token with parameters.
var acceptCases = []struct{ accept, want string }{
	{"", ""},
	{"gzip", "gzip"},
	{"deflate", "deflate"},
	{"br, deflate, gzip", "deflate"},
	{"gzip;q=1.0", ""},
	{"identity", ""},
}

// sameAnswers sends one request with each Accept-Encoding and checks that every answer
// says the same once decoded, and that gzip costs fewer bytes than none when big enough.
func (tg *target) sameAnswers(t *testing.T, what, method, path string, body []byte) []byte {
	t.Helper()
	var plain []byte
	var plainLen int
	for _, c := range acceptCases {
		e := tg.getEncoded(t, method, path, c.accept, body)
		got := e.decoded(t, what, c.want)
		if c.accept == "" {
			plain, plainLen = got, len(e.body)
			continue
		}
		if method == http.MethodGet && !sameJSON(got, plain) {
			t.Errorf("%s with Accept-Encoding %q: %.200q, without: %.200q", what, c.accept, got, plain)
		}
		if c.want != "" && plainLen > 4096 && len(e.body) >= plainLen/2 {
			t.Errorf("%s with Accept-Encoding %q: %d bytes, %d without", what, c.accept, len(e.body), plainLen)
		}
	}
	return plain
}

// sameJSON says whether two bodies hold the same JSON value (Nomad writes maps in no fixed
// order), or are the same bytes when they are not JSON.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func TestCompressionSmallLargeAndErrors(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		// A small answer is compressed too (Nomad has no threshold), an empty one included.
		tg.sameAnswers(t, "namespace list", "GET", "/v1/namespaces", nil)
		e := tg.getEncoded(t, "GET", "/v1/status/leader", "gzip", nil)
		if got := e.decoded(t, "leader", "gzip"); len(e.body) <= len(got) {
			t.Errorf("leader: %d bytes gzipped for %d plain: want the small answer compressed anyway", len(e.body), len(got))
		}
		if ct := e.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("leader gzipped: Content-Type %q, want application/json", ct)
		}

		// An error answer is compressed, and keeps its plain-text type.
		missing := "/v1/job/" + tg.id("no-such-job")
		for _, c := range acceptCases {
			e := tg.getEncoded(t, "GET", missing, c.accept, nil)
			if got := e.decoded(t, "missing job", c.want); e.status != 404 || string(got) != "job not found" {
				t.Errorf("missing job with Accept-Encoding %q: %d %q", c.accept, e.status, got)
			}
			if ct := e.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("missing job with Accept-Encoding %q: Content-Type %q", c.accept, ct)
			}
		}

		// A large variable, written and read.
		path := "nomad-restart/" + tg.id("compress")
		tg.deleteVarLater(t, path)
		items := map[string]string{}
		for i := range 200 {
			items[fmt.Sprintf("key-%03d", i)] = strings.Repeat(fmt.Sprintf("value %d of a large variable; ", i), 8)
		}
		put := []byte(varBody(path, items, ""))
		if w := tg.getEncoded(t, "PUT", "/v1/var/"+path, "gzip", put); w.status != 200 {
			t.Fatalf("write a large variable: %d %q", w.status, w.body)
		}
		got := tg.sameAnswers(t, "large variable", "GET", "/v1/var/"+path, nil)
		if v := decodeVar(t, "large variable", rawResponse{body: got}); len(v.Items) != len(items) {
			t.Errorf("large variable read back with %d items, want %d", len(v.Items), len(items))
		}
		// Nomad's CORS handler around the variables adds its own Vary after compression's.
		e = tg.getEncoded(t, "GET", "/v1/var/"+path, "gzip", nil)
		if got := e.header.Values("Vary"); strings.Join(got, ",") != "Accept-Encoding,Origin" {
			t.Errorf("variable read: Vary %q, want [Accept-Encoding Origin]", got)
		}
	})
}

func TestCompressionAllocationsAndBlockingQuery(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("compress-allocs")
		tg.runSleepJob(t, id, 3)
		tg.waitDeploymentSuccessful(t, id)
		path := "/v1/job/" + id + "/allocations"
		first := tg.getEncoded(t, "GET", path, "gzip", nil)
		var allocs []json.RawMessage
		if err := json.Unmarshal(first.decoded(t, "allocations", "gzip"), &allocs); err != nil || len(allocs) != 3 {
			t.Fatalf("allocations: %d decoded (%v)", len(allocs), err)
		}
		index := headerIndex(t, first.rawResponse)

		// A blocking query that waits out its wait answers compressed like any other.
		for _, c := range acceptCases[:3] {
			q := fmt.Sprintf("%s?index=%d&wait=200ms", path, index)
			e := tg.getEncoded(t, "GET", q, c.accept, nil)
			allocs = nil
			if err := json.Unmarshal(e.decoded(t, "blocking query", c.want), &allocs); err != nil || len(allocs) != 3 {
				t.Errorf("blocking query with Accept-Encoding %q: %d allocations decoded (%v)", c.accept, len(allocs), err)
			}
		}

		// The official client asks for gzip and reads the answer.
		stubs, _, err := tg.api.Jobs().Allocations(id, true, nil)
		if err != nil || len(stubs) != 3 {
			t.Errorf("api client: %d allocations, %v", len(stubs), err)
		}
	})
}

func TestCompressionSkipsEventStream(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		for _, accept := range []string{"", "gzip", "deflate"} {
			ctx, cancel := context.WithTimeout(tg.ctx(t), 15*time.Second)
			req, err := http.NewRequestWithContext(ctx, "GET", tg.addr+"/v1/event/stream?topic=Job", nil)
			if err != nil {
				t.Fatal(err)
			}
			if accept != "" {
				req.Header.Set("Accept-Encoding", accept)
			}
			if tg.token != "" {
				// Without it a cluster with ACLs never sends the heartbeat
				// (TestEventStreamDeniedWithoutToken).
				req.Header.Set("X-Nomad-Token", tg.token)
			}
			resp, err := tg.http.Do(req)
			if err != nil {
				t.Fatalf("event stream with Accept-Encoding %q: %v", accept, err)
			}
			// The stream's first line, the heartbeat, comes flushed and uncompressed.
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			h := resp.Header
			_ = resp.Body.Close()
			cancel()
			if err != nil || line != "{}\n" {
				t.Errorf("event stream with Accept-Encoding %q: first line %q (%v), want the heartbeat", accept, line, err)
			}
			if got := h.Get("Content-Encoding"); got != "" {
				t.Errorf("event stream with Accept-Encoding %q: Content-Encoding %q, want none", accept, got)
			}
			if got := h.Values("Vary"); len(got) != 1 || got[0] != "Accept-Encoding" {
				t.Errorf("event stream with Accept-Encoding %q: Vary %q", accept, got)
			}
			if h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-cache" {
				t.Errorf("event stream: Content-Type %q, Cache-Control %q", h.Get("Content-Type"), h.Get("Cache-Control"))
			}
		}
	})
}
