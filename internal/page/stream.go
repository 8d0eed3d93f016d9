package page

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

// streamKeepAlive is how often an idle stream sends a comment line, so that proxies keep
// the connection and the browser notices a dead one. It carries no data: the page changes
// only when a record does.
const streamKeepAlive = 20 * time.Second

// streamRetry is the reconnection delay the stream asks the browser's EventSource for
// (the `retry:` field), so that the page reconnects soon after an agent restart.
const streamRetry = time.Second

// liveUpdate is the payload of one server-sent "update" event: the page's live part,
// rendered by the same template as the page itself, and what the steering controls need.
type liveUpdate struct {
	HTML string `json:"html"`
	// Status is the record's status (a restart's or a fleet's page only), for enabling
	// the actions.
	Status string `json:"status,omitempty"`
	// Question is the record's open question (a restart's or a fleet's page only).
	Question string `json:"question,omitempty"`
}

// staleState is the payload of the stream's "stale" event: since when (RFC 3339) and why
// the records cannot be listed, or neither once they can again.
type staleState struct {
	Since string `json:"since,omitempty"`
	Error string `json:"error,omitempty"`
}

func (s *server) stale() staleState {
	since, why := s.src.Stale()
	if since.IsZero() {
		return staleState{}
	}
	return staleState{Since: since.UTC().Format(time.RFC3339), Error: why}
}

// serveStream sends a server-sent event stream of render's output: once at once (so a
// browser that reconnects after an agent restart catches up), then after each change of
// the records that alters it. A "stale" event says, before the update, when the records
// cannot be listed (and when they can again), so that the page warns it may be out of date
// while its stream still works. It ends when the client goes, or when the Source stops.
func (s *server) serveStream(w http.ResponseWriter, r *http.Request, render func(ctx context.Context) (liveUpdate, error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported by this connection", http.StatusInternalServerError)
		return
	}
	stopped := s.src.Stopped()
	select {
	case <-stopped:
		http.Error(w, "the agent is stopping; the page reconnects to the next one", http.StatusServiceUnavailable)
		return
	default:
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	fmt.Fprintf(w, "retry: %d\n\n", streamRetry.Milliseconds())
	flusher.Flush()

	ctx := r.Context()
	var last []byte
	var lastStale staleState // a new stream starts fresh in the browser
	keepAlive := time.NewTicker(streamKeepAlive)
	defer keepAlive.Stop()
	for {
		wake := s.src.Next()
		if st := s.stale(); st != lastStale {
			payload, _ := json.Marshal(st) // strings only: cannot fail
			if _, err := fmt.Fprintf(w, "event: stale\ndata: %s\n\n", payload); err != nil {
				return
			}
			flusher.Flush()
			lastStale = st
		}
		upd, err := render(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			upd = liveUpdate{HTML: `<p class="err" role="alert">` + template.HTMLEscapeString(err.Error()) + `</p>`}
		}
		payload, _ := json.Marshal(upd) // strings only: cannot fail
		if !bytes.Equal(payload, last) {
			if _, err := fmt.Fprintf(w, "event: update\ndata: %s\n\n", payload); err != nil {
				return
			}
			flusher.Flush()
			last = payload
		}
		if !waitForChange(ctx, w, flusher, wake, stopped, keepAlive.C) {
			return
		}
	}
}

// waitForChange waits for wake, sending keep-alive comments meanwhile; it reports false
// when the stream is to end (the client left, the Source stopped, a write failed).
func waitForChange(ctx context.Context, w http.ResponseWriter, f http.Flusher, wake, stopped <-chan struct{}, tick <-chan time.Time) bool {
	for {
		select {
		case <-wake:
			return true
		case <-ctx.Done():
			return false
		case <-stopped:
			return false
		case <-tick:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return false
			}
			f.Flush()
		}
	}
}
