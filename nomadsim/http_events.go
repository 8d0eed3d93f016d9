package nomadsim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// heartbeatInterval is how often an idle event stream sends "{}" (real time, as clients
// expect it).
const heartbeatInterval = 10 * time.Second

type streamFrame struct {
	Index  uint64
	Events []streamEvent
}

func (c *Cluster) handleEventStream(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	v := r.URL.Query()
	ns := v.Get("namespace")
	if ns == "" {
		ns = "default"
	}
	if err := c.authorize(r, ns, "read-job"); err != nil && ns != "*" {
		simhttp.WriteError(w, err)
		return
	}
	topics := map[string][]string{}
	for _, t := range v["topic"] {
		topic, key, found := strings.Cut(t, ":")
		if !found {
			key = "*"
		}
		switch topic {
		case "*", "Job", "Allocation", "Deployment", "Evaluation", "Node", "Service", "ACLToken", "ACLPolicy", "ACLRole", "NodePool", "HostVolume", "CSIVolume", "CSIPlugin":
		default:
			simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Invalid topic value: "+topic))
			return
		}
		topics[topic] = append(topics[topic], key)
	}
	if len(topics) == 0 {
		topics["*"] = []string{"*"}
	}
	var from uint64
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Unable to parse index: "+err.Error()))
			return
		}
		from = n
	}
	sub := &subscription{ns: ns, topics: topics, ch: make(chan streamEvent, 8192), done: make(chan struct{})}
	c.mu.Lock()
	replay := c.events.subscribe(sub, from)
	c.mu.Unlock()
	defer c.events.unsubscribe(sub)

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(events []streamEvent) bool {
		// Events of one index make one frame, as Nomad's broker batches them.
		for len(events) > 0 {
			n := 1
			for n < len(events) && events[n].Index == events[0].Index {
				n++
			}
			if err := enc.Encode(streamFrame{Index: events[0].Index, Events: events[:n]}); err != nil {
				return false
			}
			events = events[n:]
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if err := enc.Encode(struct{}{}); err != nil {
		return
	}
	if flusher != nil {
		flusher.Flush()
	}
	if !send(replay) {
		return
	}
	hb := time.NewTicker(heartbeatInterval)
	defer hb.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.done:
			return
		case <-hb.C:
			if err := enc.Encode(struct{}{}); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case ev := <-sub.ch:
			batch := []streamEvent{ev}
		drain:
			for len(batch) < 256 {
				select {
				case ev := <-sub.ch:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			if !send(batch) {
				return
			}
		}
	}
}
