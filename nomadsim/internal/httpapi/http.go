// Package httpapi is nomadsim's Nomad HTTP API over the simulated cluster's state
// (nomadsim/internal/sim): routing, the middleware every endpoint runs behind (accounting,
// injected faults, leader loss, compression), Nomad's conventions (405 "Invalid method",
// plain-text errors, X-Nomad-* headers, blocking queries), ACL checks and the endpoints.
package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// The HTTP agent's common middleware (accounting, faults, leader loss) and the conventions
// of Nomad's HTTP server (405 "Invalid method", plain-text errors, X-Nomad-* headers,
// blocking queries), which every endpoint follows.

const errInvalidMethod = "Invalid method"

// readOnlyPOST are endpoints that use POST or PUT without changing state.
var readOnlyPOST = map[string]bool{"/v1/jobs/parse": true, "/v1/job/:id/plan": true}

func isMutation(method, route string) bool {
	switch method {
	case http.MethodPut, http.MethodPost, http.MethodDelete:
		return !readOnlyPOST[route]
	}
	return false
}

// wrap adds the cluster's middleware around an endpoint.
func (c *server) wrap(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, now: c.Clock.Now}
		// A request is accounted once: when its handler ends, or when its client goes away
		// first (the handler may then run on, see below, but the client has had all it
		// will get).
		method := r.Method
		var once sync.Once
		account := func() {
			once.Do(func() { c.Record(method, route, cw.n.Load(), isMutation(method, route)) })
		}
		defer account()
		defer context.AfterFunc(r.Context(), account)()
		// Compression sits between the handler and the counting: the bytes counted are
		// those sent, compressed when the client asked for it, as Nomad's agent does.
		zw, finish := compressResponse(cw, r)
		defer finish()
		if corsRoute(route) {
			// rs/cors, around these routes only, always varies on Origin.
			zw.Header().Add("Vary", "Origin")
		}
		latency, fail := c.FaultFor(r.Method, route, r.URL.Path)
		if latency > 0 {
			t := time.NewTimer(latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if fail != nil {
			if fail.Drop {
				dropConnection(zw)
				return
			}
			body := fail.Body
			if body == "" {
				body = http.StatusText(fail.Status)
			}
			simhttp.WriteError(zw, simhttp.Errorf(fail.Status, body))
			return
		}
		if route != eventStreamRoute {
			// Nomad's handlers run their RPC (a blocking query's wait, a restart) without the
			// request's context: a client that gives up does not end them, and its connection
			// stays open on the agent, counted against MaxConnsPerClient, until the handler
			// returns. Only the cluster's end stops them here. The event stream does end with
			// its client, as Nomad's does.
			ctx, cancel := detachedContext(r.Context(), c.life)
			defer cancel()
			r = r.WithContext(ctx)
		}
		if reg := r.URL.Query().Get("region"); reg != "" && reg != c.Options.Region {
			// A single-region cluster has no server to forward to.
			simhttp.WriteError(zw, simhttp.Errorf(http.StatusInternalServerError, "No path to region"))
			return
		}
		if !strings.HasPrefix(route, "/v1/agent/") && c.LeaderLost() {
			zw.Header().Set("X-Nomad-KnownLeader", "false")
			simhttp.WriteError(zw, simhttp.Errorf(http.StatusInternalServerError, "No cluster leader"))
			return
		}
		h(zw, r)
	})
}

// corsRoute says whether Nomad's agent wraps a route in its CORS handler (rs/cors, which
// adds "Vary: Origin" to every answer): the client endpoints and the variables.
func corsRoute(route string) bool {
	return strings.HasPrefix(route, "/v1/client/") || route == "/v1/vars" || route == "/v1/var/:path"
}

// eventStreamRoute is the one route whose handler ends when its client goes away.
const eventStreamRoute = "/v1/event/stream"

// detachedContext keeps the values of a request's context but ends only with life (the
// cluster), not with the client's connection.
func detachedContext(req, life context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(req))
	stop := context.AfterFunc(life, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// countingWriter counts the bytes of a response body. It dates the answer on the
// simulated clock, as Go's HTTP server dates Nomad's on Nomad's (the Date header, written
// with the status line).
type countingWriter struct {
	http.ResponseWriter
	n     atomic.Int64 // read by the accounting while a handler may still write
	now   func() time.Time
	dated bool
}

func (w *countingWriter) WriteHeader(code int) {
	w.date()
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) date() {
	if !w.dated {
		w.dated = true
		w.Header().Set("Date", w.now().UTC().Format(http.TimeFormat))
	}
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.date()
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}

// methodIs answers 405 unless the request uses one of the methods.
func methodIs(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	simhttp.WriteError(w, simhttp.Errorf(http.StatusMethodNotAllowed, errInvalidMethod))
	return false
}

// methodHandlers are the handlers of the methods an endpoint serves, keyed by method; each
// gets the request's common query options.
type methodHandlers map[string]func(q simhttp.Query)

// serveMethods answers an endpoint that serves several methods. Nomad's agent reads the
// common query options before it looks at the method, so a malformed one is a 400 whatever
// the method; then the method's handler runs, and a method without one is a 405.
func serveMethods(w http.ResponseWriter, r *http.Request, handlers methodHandlers) {
	q, ok := query(w, r)
	if !ok {
		return
	}
	h, ok := handlers[r.Method]
	if !ok {
		methodIs(w, r)
		return
	}
	h(q)
}

// query parses the common query options, answering 400 on malformed ones.
func query(w http.ResponseWriter, r *http.Request) (simhttp.Query, bool) {
	q, err := simhttp.ParseQuery(r)
	if err != nil {
		simhttp.WriteError(w, err)
		return q, false
	}
	return q, true
}

// readQuery reads the front of a read endpoint: GET only (405 otherwise), then the common
// query options (400 when malformed).
func readQuery(w http.ResponseWriter, r *http.Request) (simhttp.Query, bool) {
	if !methodIs(w, r, http.MethodGet) {
		return simhttp.Query{}, false
	}
	return query(w, r)
}

// writeQuery reads the front of a write endpoint: PUT or POST only (405 otherwise), the
// common query options (400 when malformed), then each of the capabilities, in order, in
// the queried namespace.
func (c *server) writeQuery(w http.ResponseWriter, r *http.Request, capabilities ...string) (simhttp.Query, bool) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return simhttp.Query{}, false
	}
	q, ok := query(w, r)
	if !ok {
		return q, false
	}
	for _, capability := range capabilities {
		if err := c.authorize(r, q.Namespace, capability); err != nil {
			simhttp.WriteError(w, err)
			return q, false
		}
	}
	return q, true
}

// checkedRead is the shape of a blocking read: readQuery, then check, the read's rights,
// checked before the read (nil: none; refused, it answers the error), then run as a
// blocking query under c.Mu.
func (c *server) checkedRead(w http.ResponseWriter, r *http.Request, check func(q simhttp.Query) error, run func(q simhttp.Query) (uint64, any, error)) {
	q, ok := readQuery(w, r)
	if !ok {
		return
	}
	if check != nil {
		if err := check(q); err != nil {
			simhttp.WriteError(w, err)
			return
		}
	}
	c.blocking(w, r, q, func() (uint64, any, error) { return run(q) })
}

// inNamespace is the check of a read that needs the capability in the queried namespace.
func (c *server) inNamespace(r *http.Request, capability string) func(q simhttp.Query) error {
	return func(q simhttp.Query) error { return c.authorize(r, q.Namespace, capability) }
}

// listRead is the shape of a blocking list: readQuery, then the capability in the queried
// namespace, then run as a blocking query under c.Mu; allowed says which namespaces'
// objects the list may show.
func (c *server) listRead(w http.ResponseWriter, r *http.Request, capability string, run func(q simhttp.Query, allowed func(ns string) bool) (uint64, any, error)) {
	q, ok := readQuery(w, r)
	if !ok {
		return
	}
	allowed, err := c.authorizeList(r, q.Namespace, capability)
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.blocking(w, r, q, func() (uint64, any, error) { return run(q, allowed) })
}

// blocking runs a read as a blocking query: run is called under c.Mu and returns the index
// of the data it read and the value, which is encoded under the lock (state is shared).
func (c *server) blocking(w http.ResponseWriter, r *http.Request, q simhttp.Query, run func() (uint64, any, error)) {
	idx, v, err := simhttp.Block(r.Context(), c.Index, q, c.Jitter, func() (uint64, any, error) {
		c.Mu.Lock()
		defer c.Mu.Unlock()
		i, v, err := run()
		if err != nil {
			return i, nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return i, nil, fmt.Errorf("encoding response: %w", err)
		}
		return i, json.RawMessage(b), nil
	})
	if r.Context().Err() != nil {
		return
	}
	if writeRPCError(w, err) {
		return
	}
	simhttp.SetMeta(w, idx, !c.LeaderLost(), 0)
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	writeRaw(w, v.(json.RawMessage))
}

func writeRaw(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// write answers a write request: the result is computed under c.Mu and encoded there.
func (c *server) write(w http.ResponseWriter, fn func() (uint64, any, error)) {
	c.Mu.Lock()
	idx, v, err := fn()
	var b []byte
	if err == nil {
		b, err = json.Marshal(v)
	}
	c.Mu.Unlock()
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if idx > 0 {
		w.Header().Set("X-Nomad-Index", fmt.Sprint(idx))
	}
	writeRaw(w, b)
}

// decodeBody decodes a JSON request body with Nomad's error wording.
func decodeBody(r *http.Request, v any) error {
	if r.Body == nil {
		return simhttp.Errorf(http.StatusBadRequest, "Request body is empty")
	}
	err := json.NewDecoder(r.Body).Decode(v)
	if errors.Is(err, io.EOF) {
		return simhttp.Errorf(http.StatusBadRequest, "Request body is empty")
	}
	if err != nil {
		return simhttp.Errorf(http.StatusBadRequest, err.Error())
	}
	return nil
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// matchPrefix reports whether id has the prefix (Nomad's prefix lookups are plain prefixes).
func matchPrefix(id, prefix string) bool { return strings.HasPrefix(id, prefix) }
