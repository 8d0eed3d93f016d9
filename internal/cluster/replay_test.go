package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// exchange is one request/response pair recorded from a real Nomad agent
// (testdata/nomad-http).
type exchange struct {
	Request struct {
		Method string
		Path   string
		Body   json.RawMessage
	} `json:"request"`
	Response struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	} `json:"response"`
}

func loadExchange(t *testing.T, name string) exchange {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "nomad-http", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex exchange
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatalf("decoding %s: %v", name, err)
	}
	return ex
}

// write answers as the recorded agent did: its headers, status and body (a JSON string
// body is Nomad's plain-text error).
func (ex exchange) write(w http.ResponseWriter) {
	for k, v := range ex.Response.Headers {
		w.Header().Set(k, v)
	}
	var text string
	body := []byte(ex.Response.Body)
	if json.Unmarshal(ex.Response.Body, &text) == nil {
		body = []byte(text)
	}
	w.WriteHeader(ex.Response.Status)
	_, _ = w.Write(body)
}

// decodeBody decodes the recorded response body into out.
func (ex exchange) decodeBody(t *testing.T, out any) {
	t.Helper()
	if err := json.Unmarshal(ex.Response.Body, out); err != nil {
		t.Fatal(err)
	}
}

// plain answers like Nomad's HTTP agent does for errors: text/plain.
func plain(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text))
}

// jsonAt answers v as JSON with X-Nomad-Index index.
func jsonAt(w http.ResponseWriter, index uint64, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Nomad-Index", itoa(index))
	w.Header().Set("X-Nomad-KnownLeader", "true")
	w.Header().Set("X-Nomad-LastContact", "0")
	_ = json.NewEncoder(w).Encode(v)
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// recorder is a fake Nomad: a handler, and the requests it saw.
type recorder struct {
	mu     sync.Mutex
	reqs   []*http.Request
	bodies []string
}

// body returns the body of the i-th request.
func (r *recorder) body(i int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[i]
}

func (r *recorder) seen() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs...)
}

// replayNomad is a Nomad client of a server that answers every request with the recorded
// exchange name.
func replayNomad(t *testing.T, name string) (*Nomad, *recorder) {
	t.Helper()
	ex := loadExchange(t, name)
	return fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { ex.write(w) })
}

// fakeNomad starts an httptest server running h, and a Nomad talking to it with fast
// retries.
func fakeNomad(t *testing.T, h http.HandlerFunc) (*Nomad, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Clone(r.Context()))
		rec.bodies = append(rec.bodies, string(body))
		rec.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	conf := api.DefaultConfig()
	conf.Address = srv.URL
	conf.SecretID = ""
	conf.Namespace = ""
	conf.Region = ""
	client, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	return NewNomadWithOptions(client, Options{
		Retry:     RetryPolicy{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxElapsed: 2 * time.Second},
		WatchWait: time.Second,
	}), rec
}
