package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// heartbeatInterval is how often an idle event stream sends "{}" (real time, as clients
// expect it).
const heartbeatInterval = 10 * time.Second

type streamFrame struct {
	Index  uint64
	Events []sim.StreamEvent
}

func (c *server) handleEventStream(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	v := r.URL.Query()
	ns := v.Get("namespace")
	if ns == "" {
		ns = "default"
	}
	if err := c.authorize(r, ns, "read-job"); err != nil && ns != "*" {
		c.deniedStream(w, r)
		return
	}
	topics, err := eventTopics(v["topic"])
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	from, err := eventIndex(v.Get("index"))
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	sub := &sim.Subscription{Namespace: ns, Topics: topics, Events: make(chan sim.StreamEvent, 8192), Done: make(chan struct{})}
	c.Mu.Lock()
	replay := c.Events.Subscribe(sub, from)
	c.Mu.Unlock()
	defer c.Events.Unsubscribe(sub)

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	// Nomad writes the stream on the hijacked connection, past the agent's compression.
	uncompressedResponse(w)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	out := &frameWriter{enc: json.NewEncoder(w), flusher: flusher}
	if !out.heartbeat() || !out.send(replay) {
		return
	}
	out.stream(r.Context(), sub)
}

// deniedStreamLife is how long Nomad keeps a denied event stream open before it closes it
// (10 to 35 s on a Nomad 2.0 agent; simulated time here).
const deniedStreamLife = 30 * time.Second

// deniedStream answers an event stream whose token may not read it as Nomad does on a
// cluster with ACLs: the stream's headers at once (its HTTP handler writes them before the
// RPC checks the token), no heartbeat and no event, then the connection is closed after a
// while. A client waiting for the first heartbeat waits in vain: there is no 403 to read.
func (c *server) deniedStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	uncompressedResponse(w)
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	select {
	case <-r.Context().Done():
	case <-c.sleepCh(deniedStreamLife):
	}
}

// eventTopics parses the topic parameters ("Topic" or "Topic:key"; all topics when none).
func eventTopics(params []string) (map[string][]string, error) {
	topics := map[string][]string{}
	for _, t := range params {
		topic, key, found := strings.Cut(t, ":")
		if !found {
			key = "*"
		}
		switch topic {
		case "*", "Job", "Allocation", "Deployment", "Evaluation", "Node", "Service", "ACLToken", "ACLPolicy", "ACLRole", "NodePool", "HostVolume", "CSIVolume", "CSIPlugin":
		default:
			return nil, simhttp.Errorf(http.StatusBadRequest, "Invalid topic value: "+topic)
		}
		topics[topic] = append(topics[topic], key)
	}
	if len(topics) == 0 {
		topics["*"] = []string{"*"}
	}
	return topics, nil
}

// eventIndex parses the index parameter: the stream starts after it (0 when absent).
func eventIndex(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, simhttp.Errorf(http.StatusBadRequest, "Unable to parse index: "+err.Error())
	}
	return n, nil
}

// frameWriter writes an event stream's frames, flushing each write to the client.
type frameWriter struct {
	enc     *json.Encoder
	flusher http.Flusher // nil when the writer cannot flush
}

func (f *frameWriter) flush() {
	if f.flusher != nil {
		f.flusher.Flush()
	}
}

// heartbeat sends "{}", as Nomad does first and whenever the stream is idle.
func (f *frameWriter) heartbeat() bool {
	if err := f.enc.Encode(struct{}{}); err != nil {
		return false
	}
	f.flush()
	return true
}

// send writes events, those of one index as one frame, as Nomad's broker batches them.
func (f *frameWriter) send(events []sim.StreamEvent) bool {
	for len(events) > 0 {
		n := 1
		for n < len(events) && events[n].Index == events[0].Index {
			n++
		}
		if err := f.enc.Encode(streamFrame{Index: events[0].Index, Events: events[:n]}); err != nil {
			return false
		}
		events = events[n:]
	}
	f.flush()
	return true
}

// stream sends the subscription's events as they come, with heartbeats while idle, until
// the client goes away, the subscription ends or a write fails.
func (f *frameWriter) stream(ctx context.Context, sub *sim.Subscription) {
	hb := time.NewTicker(heartbeatInterval)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Done:
			return
		case <-hb.C:
			if !f.heartbeat() {
				return
			}
		case ev := <-sub.Events:
			if !f.send(drainEvents(ev, sub.Events)) {
				return
			}
		}
	}
}

// drainEvents is first and the events already waiting behind it, up to 256 in all.
func drainEvents(first sim.StreamEvent, ch <-chan sim.StreamEvent) []sim.StreamEvent {
	batch := []sim.StreamEvent{first}
	for len(batch) < 256 {
		select {
		case ev := <-ch:
			batch = append(batch, ev)
		default:
			return batch
		}
	}
	return batch
}
