// Package page is the agent's web page: the restarts and fleets the agent follows, updated
// live as their records change (server-sent events), each restart's timeline and
// availability budget, the actions on a restart or a fleet, and the form that files a new
// restart. Actions run with the Nomad ACL token the browser sends, never the agent's.
//
// The page reads what it shows from a Source (the agent's view of the records) and acts
// through Actions built per request; it knows nothing of how the agent finds and drives
// the records.
package page

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// Source is what the page shows and what keeps its live streams current: the agent's view
// of the records, and its notifications when they change.
type Source interface {
	// Restarts are the restarts as recently listed (the view may be a few seconds old),
	// newest first, and why some of them could not be read.
	Restarts(ctx context.Context) ([]*restart.Record, error)
	// Restart reads one restart by ID or unique prefix: store.ErrNotFound when none has
	// it, *store.AmbiguousIDError when several do.
	Restart(ctx context.Context, idOrPrefix string) (*restart.Record, error)
	// Fleets are the fleets as last listed, newest first, and why that listing failed;
	// ErrNoFleets when the agent follows no fleets.
	Fleets() ([]*fleet.Record, error)
	// Fleet reads one fleet by ID or unique prefix: store.ErrFleetNotFound when none has
	// it, *store.AmbiguousIDError when several do, ErrNoFleets.
	Fleet(ctx context.Context, idOrPrefix string) (*fleet.Record, error)

	// Next returns a channel closed at the next change of the records (a listing, an
	// action): a stream takes it before it renders, so that no change is missed.
	Next() <-chan struct{}
	// Changed tells the streams that the page itself changed a record (an action, a new
	// restart), so that they show it ahead of the next listing.
	Changed()
	// Stale says since when and why the records cannot be listed (zero since while they
	// can): what the page shows may be out of date although its stream works.
	Stale() (since time.Time, why string)
	// Stopped is closed once the records are no longer followed (the agent stops): the
	// streams end, and the browsers reconnect to the next agent.
	Stopped() <-chan struct{}

	// Holder names the agent, in the header and as the author of the page's actions.
	Holder() string
	// Now is the clock of the progress and the timelines.
	Now() time.Time
}

// ErrNoFleets is a Source's answer for fleets when it follows none.
var ErrNoFleets = errors.New("this agent follows no fleets: they need the Nomad store (-state nomad)")

// Config wires the page.
type Config struct {
	// Actions builds, for one request, what performs the page's actions with the Nomad ACL
	// token the browser sent ("" when none: Nomad's anonymous token), so that the page can
	// do nothing that token could not do with the CLI. Nil: the page steers and files
	// nothing.
	Actions func(token string) (Actions, error)
	// Logger hears the actions performed and refused; nil: none.
	Logger *slog.Logger
}

// server serves the page of one Source.
type server struct {
	src     Source
	actions func(token string) (Actions, error)
	log     *slog.Logger
}

// New returns the page's handler:
//
//	GET  /                          the restarts, newest first, each with a progress bar (and the fleets above them)
//	GET  /events                    server-sent events: the list's live part as records change
//	GET  /restart/<id>              one restart (ID or unique prefix): timeline, allocations, events
//	GET  /restart/<id>/events       server-sent events: that restart's live part
//	POST /restart/<id>/<action>     pause, resume, cancel or answer, with the X-Nomad-Token of the request
//	POST /restarts/plan             a new restart's plan (a dry run), with the request's token
//	POST /restarts                  file that restart (as run -detach), with the request's token
//	GET  /fleet/<id>, its /events, POST /fleet/<id>/<action>: a fleet, as a restart
//	GET  /page.js                   the pages' one script
//
// Reading uses the Source; an action uses only the token the request carries
// (Config.Actions), and cross-site requests for actions are refused.
func New(src Source, cfg Config) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &server{src: src, actions: cfg.Actions, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.serveList)
	mux.HandleFunc("GET /events", s.serveListEvents)
	restarts, fleets := s.restartView(), s.fleetView()
	mux.HandleFunc("GET /restart/{id}", restarts.serve)
	mux.HandleFunc("GET /restart/{id}/events", restarts.serveEvents)
	mux.HandleFunc("GET /fleet/{id}", fleets.serve)
	mux.HandleFunc("GET /fleet/{id}/events", fleets.serveEvents)
	sameOrigin := http.NewCrossOriginProtection()
	mux.Handle("POST /restart/{id}/{action}", sameOrigin.Handler(s.actionHandler(restartKind)))
	mux.Handle("POST /fleet/{id}/{action}", sameOrigin.Handler(s.actionHandler(fleetKind)))
	mux.Handle("POST /restarts/plan", sameOrigin.Handler(http.HandlerFunc(s.servePlan)))
	mux.Handle("POST /restarts", sameOrigin.Handler(http.HandlerFunc(s.serveFile)))
	mux.HandleFunc("GET /page.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write([]byte(pageScript))
	})
	return securityHeaders(mux)
}

// securityHeaders lets the pages run their own script only, and never be framed by another
// site (the actions must not be clickable through someone else's page).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// frame is what every page's frame shows.
type frame struct {
	Title, Holder, Stream string
	Status, Question      string
	// Actions is the steering section of a restart's or a fleet's page.
	Actions actionsView
	Live    any
}

// questionText is the question the record h heads waits on, as the page shows it ("" when
// it waits for none).
func questionText(h steer.Head) string {
	if h.Question == nil || h.Status != restart.StatusWaiting {
		return ""
	}
	return h.Question.Text + " [" + h.Question.Options + "]"
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

// short is an ID shortened as Nomad shows IDs: 8 characters.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
