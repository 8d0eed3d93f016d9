package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Handler serves the agent's HTTP interface:
//
//	GET  /                          the restarts, newest first, each with a progress bar
//	GET  /events                    server-sent events: the list's live part as records change
//	GET  /restart/<id>              one restart (ID or unique prefix): timeline, allocations, events
//	GET  /restart/<id>/events       server-sent events: that restart's live part
//	POST /restart/<id>/<action>     pause, resume, cancel or answer, with the X-Nomad-Token of the request
//	POST /restarts/plan             a new restart's plan (a dry run), with the request's token
//	POST /restarts                  file that restart (as run -detach), with the request's token
//	GET  /fleet/<id>, its /events, POST /fleet/<id>/<action>: a fleet, as a restart (fleet_page.go)
//	GET  /healthz                   200 while the agent runs (503 before its first listing, and while stopping)
//	GET  /metrics                   Prometheus metrics
//
// Reading uses the agent's own token; an action uses only the token the request carries
// (Config.Steer), and cross-site requests for actions are refused.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", a.serveList)
	mux.HandleFunc("GET /events", a.serveListEvents)
	mux.HandleFunc("GET /restart/{id}", a.serveRestart)
	mux.HandleFunc("GET /restart/{id}/events", a.serveRestartEvents)
	sameOrigin := http.NewCrossOriginProtection()
	mux.Handle("POST /restart/{id}/{action}", sameOrigin.Handler(http.HandlerFunc(a.serveAction)))
	mux.Handle("POST /restarts/plan", sameOrigin.Handler(http.HandlerFunc(a.servePlan)))
	mux.Handle("POST /restarts", sameOrigin.Handler(http.HandlerFunc(a.serveFile)))
	a.fleetRoutes(mux, sameOrigin) // GET /fleet/<id>, its events, POST /fleet/<id>/<action>
	mux.HandleFunc("GET /page.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write([]byte(pageScript))
	})
	mux.HandleFunc("GET /healthz", a.serveHealth)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// Refresh the status gauges from the records (at most every ViewMaxAge).
		if _, err := a.view.records(r.Context()); err != nil {
			a.log.Debug("refreshing restarts for metrics", "err", err)
		}
		a.metrics.Handler().ServeHTTP(w, r)
	})
	return securityHeaders(mux)
}

// securityHeaders lets the pages run the agent's own script only, and never be framed by
// another site (the actions must not be clickable through someone else's page).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
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

// frame is what every page's frame shows.
type frame struct {
	Title, Holder, Stream string
	Status, Question      string
	Live                  any
}

type listRow struct {
	Rec      *restart.Record
	Progress restart.Progress
	Percent  int
}

type listLive struct {
	Rows  []listRow
	Error string
	// Fleets are shown above the restarts when there are any (fleet_page.go).
	Fleets      []fleetRow
	FleetsError string
}

func (a *Agent) listData(ctx context.Context) listLive {
	recs, err := a.view.records(ctx)
	var data listLive
	if err != nil {
		data.Error = err.Error()
	}
	now := a.cfg.Now()
	for _, rec := range recs {
		p := rec.Progress(now)
		data.Rows = append(data.Rows, listRow{Rec: rec, Progress: p, Percent: percent(p)})
	}
	data.Fleets, data.FleetsError = a.fleetRows()
	return data
}

func (a *Agent) serveList(w http.ResponseWriter, r *http.Request) {
	render(w, listPage, frame{Title: "Restarts - nomad-restart", Holder: a.cfg.Holder, Stream: "/events", Live: a.listData(r.Context())})
}

func (a *Agent) serveListEvents(w http.ResponseWriter, r *http.Request) {
	a.serveStream(w, r, func(ctx context.Context) (liveUpdate, error) {
		html, err := renderString(listPage, "listLive", a.listData(ctx))
		return liveUpdate{HTML: html}, err
	})
}

type restartLive struct {
	Rec      *restart.Record
	Progress restart.Progress
	Percent  int
	Timeline timeline
}

func (a *Agent) restartData(rec *restart.Record) restartLive {
	now := a.cfg.Now()
	p := rec.Progress(now)
	return restartLive{Rec: rec, Progress: p, Percent: percent(p), Timeline: buildTimeline(rec, now)}
}

func (a *Agent) serveRestart(w http.ResponseWriter, r *http.Request) {
	rec, ok := a.findForPage(w, r)
	if !ok {
		return
	}
	render(w, restartPage, frame{
		Title:  fmt.Sprintf("Restart %s of %s - nomad-restart", short(rec.ID), rec.JobID),
		Holder: a.cfg.Holder, Stream: "/restart/" + rec.ID + "/events",
		Status: string(rec.Status), Question: questionText(rec), Live: a.restartData(rec),
	})
}

// serveRestartEvents streams one restart's live part, read from the records the agent's
// watch keeps current.
func (a *Agent) serveRestartEvents(w http.ResponseWriter, r *http.Request) {
	rec, ok := a.findForPage(w, r)
	if !ok {
		return
	}
	ns, id := rec.Namespace, rec.ID
	a.serveStream(w, r, func(ctx context.Context) (liveUpdate, error) {
		cur, err := a.view.cached(ctx, ns, id)
		if err != nil {
			return liveUpdate{}, err
		}
		html, err := renderString(restartPage, "restartLive", a.restartData(cur))
		return liveUpdate{HTML: html, Status: string(cur.Status), Question: questionText(cur)}, err
	})
}

// findForPage resolves the restart a page names, answering the error itself when it fails.
func (a *Agent) findForPage(w http.ResponseWriter, r *http.Request) (*restart.Record, bool) {
	rec, err := a.view.record(r.Context(), r.PathValue("id"))
	var amb *store.AmbiguousIDError
	switch {
	case errors.Is(err, store.ErrNotFound):
		http.Error(w, fmt.Sprintf("no restart with ID or prefix %q", r.PathValue("id")), http.StatusNotFound)
	case errors.As(err, &amb):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		http.Error(w, "reading the restart: "+err.Error(), http.StatusBadGateway)
	default:
		return rec, true
	}
	return nil, false
}

func questionText(rec *restart.Record) string {
	if rec.Question == nil || rec.Status != restart.StatusWaiting {
		return ""
	}
	return rec.Question.Text + " [" + rec.Question.Options + "]"
}

func percent(p restart.Progress) int {
	if p.Total == 0 {
		return 100
	}
	return (p.Done + p.Failed + p.Skipped) * 100 / p.Total
}

// render writes page t, whole or not at all.
func render(w http.ResponseWriter, t *template.Template, data any) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(b.String()))
}

func renderString(t *template.Template, name string, data any) (string, error) {
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("rendering the page: %w", err)
	}
	return b.String(), nil
}
