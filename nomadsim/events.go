package nomadsim

import (
	"encoding/json"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// The event stream (/v1/event/stream): Nomad's event broker, simplified. Events are
// published under c.mu; payloads are encoded at once for live subscribers and lazily (with
// the state current when read) for the replay buffer, so that an idle stream costs nothing.

// streamEvent is one event as Nomad's stream encodes it.
type streamEvent struct {
	Topic      string
	Type       string
	Key        string
	Namespace  string
	FilterKeys []string
	Index      uint64
	Payload    json.RawMessage
}

type pendingEvent struct {
	ev    streamEvent
	build func() json.RawMessage // encodes the payload; called under c.mu
}

// historySize is how many events the replay buffer keeps.
const historySize = 256

type broker struct {
	mu      sync.Mutex
	history []*pendingEvent
	subs    map[*subscription]struct{}
	closed  bool
}

type subscription struct {
	ns     string
	topics map[string][]string // topic -> keys; "*" matches all
	ch     chan streamEvent
	done   chan struct{}
}

func newBroker() *broker { return &broker{subs: map[*subscription]struct{}{}} }

func (s *subscription) matches(e *streamEvent) bool {
	if s.ns != "*" && e.Namespace != "" && e.Namespace != s.ns {
		return false
	}
	keys, ok := s.topics[e.Topic]
	if !ok {
		keys, ok = s.topics["*"]
	}
	if !ok {
		return false
	}
	for _, k := range keys {
		if k == "*" || k == e.Key {
			return true
		}
		for _, fk := range e.FilterKeys {
			if fk == k {
				return true
			}
		}
	}
	return false
}

// publish records an event. Callers hold c.mu.
func (b *broker) publish(e streamEvent, build func() json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	pe := &pendingEvent{ev: e, build: build}
	if len(b.subs) > 0 {
		var payload json.RawMessage
		for s := range b.subs {
			if !s.matches(&e) {
				continue
			}
			if payload == nil {
				payload = build()
			}
			ev := e
			ev.Payload = payload
			select {
			case s.ch <- ev:
			default:
				// A subscriber too slow to keep up is dropped, as Nomad closes it.
				delete(b.subs, s)
				close(s.done)
			}
		}
		if payload != nil {
			pe.ev.Payload = payload
			pe.build = nil
		}
	}
	if len(b.history) >= historySize {
		copy(b.history, b.history[1:])
		b.history = b.history[:len(b.history)-1]
	}
	b.history = append(b.history, pe)
}

// subscribe registers a subscription and returns the buffered events it should replay
// first (those at or after fromIndex). Callers hold c.mu, so payloads can be built.
func (b *broker) subscribe(s *subscription, fromIndex uint64) []streamEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	var replay []streamEvent
	for _, pe := range b.history {
		if pe.ev.Index < fromIndex || !s.matches(&pe.ev) {
			continue
		}
		ev := pe.ev
		if ev.Payload == nil && pe.build != nil {
			ev.Payload = pe.build()
		}
		replay = append(replay, ev)
	}
	if !b.closed {
		b.subs[s] = struct{}{}
	} else {
		close(s.done)
	}
	return replay
}

func (b *broker) unsubscribe(s *subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.done)
	}
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		delete(b.subs, s)
		close(s.done)
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// queueEvent records an event of the current hold of c.mu; a later event about the same
// object in the same hold replaces it. Callers hold c.mu.
func (c *Cluster) queueEvent(e streamEvent, build func() json.RawMessage) {
	k := e.Topic + "/" + e.Key
	if i, ok := c.pendingIdx[k]; ok {
		c.pending[i] = pendingEvent{ev: e, build: build}
		return
	}
	c.pendingIdx[k] = len(c.pending)
	c.pending = append(c.pending, pendingEvent{ev: e, build: build})
}

// flushEvents publishes the hold's events; it runs as c.mu is released.
func (c *Cluster) flushEvents() {
	if len(c.pending) == 0 {
		return
	}
	for i, pe := range c.pending {
		c.events.publish(pe.ev, pe.build)
		c.pending[i] = pendingEvent{}
	}
	c.pending = c.pending[:0]
	clear(c.pendingIdx)
}

// publishAlloc publishes an Allocation event (payload without the job, as Nomad sends it).
func (c *Cluster) publishAlloc(ar *allocRun, typ string) {
	keys := []string{ar.a.JobID}
	if ar.a.DeploymentID != "" {
		keys = append(keys, ar.a.DeploymentID)
	}
	c.queueEvent(streamEvent{Topic: "Allocation", Type: typ, Key: ar.a.ID, Namespace: ar.a.Namespace, FilterKeys: keys, Index: c.idx.Current()},
		func() json.RawMessage {
			cp := *ar.view()
			cp.Job = nil
			return mustJSON(map[string]any{"Allocation": &cp})
		})
}

func (c *Cluster) publishEval(ev *api.Evaluation) {
	keys := []string{ev.JobID}
	if ev.DeploymentID != "" {
		keys = append(keys, ev.DeploymentID)
	}
	c.queueEvent(streamEvent{Topic: "Evaluation", Type: "EvaluationUpdated", Key: ev.ID, Namespace: ev.Namespace, FilterKeys: keys, Index: c.idx.Current()},
		func() json.RawMessage { return mustJSON(map[string]any{"Evaluation": ev}) })
}

func (c *Cluster) publishDeployment(d *api.Deployment, typ string) {
	c.queueEvent(streamEvent{Topic: "Deployment", Type: typ, Key: d.ID, Namespace: d.Namespace, FilterKeys: []string{d.JobID}, Index: c.idx.Current()},
		func() json.RawMessage { return mustJSON(map[string]any{"Deployment": d}) })
}

func (c *Cluster) publishJob(j *jobEntry, typ string) {
	job := j.current()
	c.queueEvent(streamEvent{Topic: "Job", Type: typ, Key: j.key.id, Namespace: j.key.ns, Index: c.idx.Current()},
		func() json.RawMessage { return mustJSON(map[string]any{"Job": job}) })
}
