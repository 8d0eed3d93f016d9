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

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// The HTTP agent: routing, the common middleware (accounting, faults, leader loss) and the
// conventions of Nomad's HTTP server (405 "Invalid method", plain-text errors, X-Nomad-*
// headers, blocking queries).

const errInvalidMethod = "Invalid method"

// route is one registered endpoint.
type route struct {
	pattern string // ServeMux pattern, e.g. "/v1/job/{id}/allocations"
	h       http.HandlerFunc
}

func (c *server) routes() []route {
	return []route{
		{"/v1/jobs", c.handleJobs},
		{"/v1/jobs/parse", c.handleJobsParse},
		{"/v1/job/{id}", c.handleJob},
		{"/v1/job/{id}/versions", c.handleJobVersions},
		{"/v1/job/{id}/allocations", c.handleJobAllocations},
		{"/v1/job/{id}/evaluations", c.handleJobEvaluations},
		{"/v1/job/{id}/deployments", c.handleJobDeployments},
		{"/v1/job/{id}/deployment", c.handleJobDeployment},
		{"/v1/job/{id}/evaluate", c.handleJobEvaluate},
		{"/v1/job/{id}/scale", c.handleJobScale},
		{"/v1/job/{id}/summary", c.handleJobSummary},
		{"/v1/job/{id}/plan", c.handleJobPlan},
		{"/v1/job/{id}/submission", c.handleJobSubmission},
		{"/v1/job/{id}/services", c.handleJobServices},
		{"/v1/job/{id}/stable", c.handleJobStable},
		{"/v1/job/{id}/revert", c.handleJobRevert},
		{"/v1/validate/job", c.handleValidateJob},
		{"/v1/allocations", c.handleAllocations},
		{"/v1/allocation/{id}", c.handleAllocation},
		{"/v1/allocation/{id}/stop", c.handleAllocStop},
		{"/v1/allocation/{id}/services", c.handleAllocServices},
		{"/v1/client/allocation/{id}/restart", c.handleAllocRestart},
		{"/v1/client/allocation/{id}/checks", c.handleAllocChecks},
		{"/v1/client/allocation/{id}/stats", c.handleAllocStats},
		{"/v1/client/fs/", c.handleFs},
		{"/v1/evaluations", c.handleEvaluations},
		{"/v1/evaluation/{id}", c.handleEvaluation},
		{"/v1/evaluation/{id}/allocations", c.handleEvaluationAllocations},
		{"/v1/deployments", c.handleDeployments},
		{"/v1/deployment/{id}", c.handleDeployment},
		{"/v1/deployment/allocations/{id}", c.handleDeploymentAllocations},
		{"/v1/deployment/promote/{id}", c.handleDeploymentPromote},
		{"/v1/deployment/fail/{id}", c.handleDeploymentFail},
		{"/v1/deployment/pause/{id}", c.handleDeploymentPause},
		{"/v1/nodes", c.handleNodes},
		{"/v1/node/{id}", c.handleNode},
		{"/v1/node/{id}/allocations", c.handleNodeAllocations},
		{"/v1/agent/self", c.handleAgentSelf},
		{"/v1/agent/members", c.handleAgentMembers},
		{"/v1/agent/health", c.handleAgentHealth},
		{"/v1/status/leader", c.handleStatusLeader},
		{"/v1/status/peers", c.handleStatusPeers},
		{"/v1/regions", c.handleRegions},
		{"/v1/namespaces", c.handleNamespaces},
		{"/v1/namespace", c.handleNamespaceCreate},
		{"/v1/namespace/{name}", c.handleNamespace},
		{"/v1/services", c.handleServices},
		{"/v1/service/{name}", c.handleService},
		{"/v1/event/stream", c.handleEventStream},
	}
}

// server is Nomad's HTTP API over a simulated cluster's state: its handlers read and change
// the state under the state's lock, as Nomad's endpoints run their RPCs.
type server struct {
	*sim.Cluster
	// life is the cluster's: a request's RPC ends with it, not with the request's client.
	life context.Context
}

// New builds Nomad's HTTP API on the cluster's state; life is the cluster's life.
func New(life context.Context, c *sim.Cluster) http.Handler {
	return (&server{Cluster: c, life: life}).handler()
}

// handler builds the Nomad HTTP API.
func (c *server) handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range c.routes() {
		mux.Handle(rt.pattern, c.wrap(routeName(rt.pattern), rt.h))
	}
	mux.Handle("/v1/var/", c.wrap("/v1/var/:path", c.Ext.Vars.Handler().ServeHTTP))
	mux.Handle("/v1/vars", c.wrap("/v1/vars", c.Ext.Vars.Handler().ServeHTTP))
	mux.Handle("/v1/acl/", c.wrap("/v1/acl/:rest", c.Ext.ACL.Handler().ServeHTTP))
	mux.Handle("/", c.wrap("/", func(w http.ResponseWriter, r *http.Request) {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusNotFound, "Invalid URL"))
	}))
	return mux
}

// routeName turns a ServeMux pattern into Nomad's ":param" notation.
func routeName(pattern string) string {
	parts := strings.Split(pattern, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			parts[i] = ":" + strings.TrimSuffix(strings.TrimPrefix(p, "{"), "...}")
			parts[i] = strings.TrimSuffix(parts[i], "}")
		}
	}
	return strings.Join(parts, "/")
}

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
