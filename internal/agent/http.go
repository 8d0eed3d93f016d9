package agent

import (
	"encoding/json"
	"net/http"

	"github.com/nomad-restart/nomad-restart/internal/page"
)

// Handler serves the agent's HTTP interface:
//
//	GET  /healthz                   200 while the agent runs (503 before its first listing, and while stopping)
//	GET  /metrics                   Prometheus metrics
//	everything else                 the web page (package page): the restarts and fleets, live, and their actions
//
// The page reads what the agent sees (pageSource) with the agent's own token; an action uses
// only the token the request carries (Config.Actions).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.serveHealth)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// Refresh the status gauges from the records (at most every ViewMaxAge).
		if _, err := a.view.records(r.Context()); err != nil {
			a.log.Debug("refreshing restarts for metrics", "err", err)
		}
		a.metrics.Handler().ServeHTTP(w, r)
	})
	for _, path := range []string{"/healthz", "/metrics"} {
		// Any other method on these paths is refused as the mux refuses it elsewhere,
		// rather than passed on to the page (which would answer 404).
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		})
	}
	mux.Handle("/", page.New(pageSource{a}, page.Config{Actions: a.cfg.Actions, Logger: a.log}))
	return mux
}

func (a *Agent) serveHealth(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	body := map[string]any{"holder": a.cfg.Holder, "driving": a.drivingCount(), "listed": a.running, "stopping": a.stopped}
	ok := a.running && !a.stopped
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if ok {
		body["status"] = "ok"
	} else {
		body["status"] = "unavailable"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}
