package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"sync"
	"time"
)

// pageHub tells the page's live streams that the records may have changed: the agent's
// discovery (the shared blocking list of the records, or the local store's listing) calls
// changed after each pass, and every stream waiting on the hub renders again. The zero
// value is ready to use.
type pageHub struct {
	mu      sync.Mutex
	seq     uint64
	wake    chan struct{} // closed at the next change, then replaced
	done    chan struct{} // closed when the agent stops
	stopped bool
	// staleSince is when the agent's discovery last began failing to list the records
	// (zero while it lists them), staleWhy its last error: the page may be out of date even
	// though its stream works.
	staleSince time.Time
	staleWhy   string
}

// changed wakes every stream waiting on the hub.
func (h *pageHub) changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.wakeLocked()
}

func (h *pageHub) wakeLocked() {
	if h.wake != nil {
		close(h.wake)
		h.wake = nil
	}
}

// listing records the outcome of one listing of the records by the agent's discovery: a
// failure (at now) marks what the page shows as possibly out of date, the next success
// clears the mark. Streams are woken when the mark is set or cleared (not at each failed
// retry); the records themselves did not change, so the change number stays.
func (h *pageHub) listing(now time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil && h.staleSince.IsZero():
		return
	case err == nil:
		h.staleSince, h.staleWhy = time.Time{}, ""
	case h.staleSince.IsZero():
		h.staleSince, h.staleWhy = now, err.Error()
	default:
		h.staleWhy = err.Error() // still failing: no news for the streams
		return
	}
	h.wakeLocked()
}

// staleState is the payload of the stream's "stale" event: since when (RFC 3339) and why
// the agent cannot list the records, or neither once it can again.
type staleState struct {
	Since string `json:"since,omitempty"`
	Error string `json:"error,omitempty"`
}

func (h *pageHub) stale() staleState {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.staleSince.IsZero() {
		return staleState{}
	}
	return staleState{Since: h.staleSince.UTC().Format(time.RFC3339), Error: h.staleWhy}
}

// stop ends every stream: the agent no longer watches the records.
func (h *pageHub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.stopped = true
		close(h.doneLocked())
	}
}

// next returns the current change number and a channel closed at the next change. A
// stream takes it before it renders, so a change during the rendering is never missed.
func (h *pageHub) next() (uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wake == nil {
		h.wake = make(chan struct{})
	}
	return h.seq, h.wake
}

// ended is closed once the agent stopped.
func (h *pageHub) ended() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doneLocked()
}

func (h *pageHub) doneLocked() chan struct{} {
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

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
	// Status is the restart's status (detail page only), for enabling the actions.
	Status string `json:"status,omitempty"`
	// Question is the restart's open question (detail page only).
	Question string `json:"question,omitempty"`
}

// serveStream sends a server-sent event stream of render's output: once at once (so a
// browser that reconnects after an agent restart catches up), then after each change of
// the records that alters it. A "stale" event says, before the update, when the agent
// cannot list the records (and when it can again), so that the page warns it may be out of
// date while its stream still works. It ends when the client goes, or when the agent stops.
func (a *Agent) serveStream(w http.ResponseWriter, r *http.Request, render func(ctx context.Context) (liveUpdate, error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported by this connection", http.StatusInternalServerError)
		return
	}
	select {
	case <-a.page.ended():
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
		_, wake := a.page.next()
		if st := a.page.stale(); st != lastStale {
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
		if !waitForChange(ctx, w, flusher, wake, a.page.ended(), keepAlive.C) {
			return
		}
	}
}

// waitForChange waits for wake, sending keep-alive comments meanwhile; it reports false
// when the stream is to end (the client left, the agent stopped, a write failed).
func waitForChange(ctx context.Context, w http.ResponseWriter, f http.Flusher, wake, ended <-chan struct{}, tick <-chan time.Time) bool {
	for {
		select {
		case <-wake:
			return true
		case <-ctx.Done():
			return false
		case <-ended:
			return false
		case <-tick:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return false
			}
			f.Flush()
		}
	}
}
