package sim

import (
	"encoding/json"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// The event stream (/v1/event/stream): Nomad's event broker, simplified. Events are
// published under c.Mu; payloads are encoded at once for live subscribers and lazily (with
// the state current when read) for the replay buffer, so that an idle stream costs nothing.

// StreamEvent is one event as Nomad's stream encodes it.
type StreamEvent struct {
	Topic      string
	Type       string
	Key        string
	Namespace  string
	FilterKeys []string
	Index      uint64
	Payload    json.RawMessage
}

type pendingEvent struct {
	ev    StreamEvent
	build func() json.RawMessage // encodes the payload; called under c.mu
}

// historySize is how many events the replay buffer keeps.
const historySize = 256

type broker struct {
	mu      sync.Mutex
	history []*pendingEvent
	subs    map[*Subscription]struct{}
	closed  bool
}

type Subscription struct {
	Namespace string
	Topics    map[string][]string // topic -> keys; "*" matches all
	Events    chan StreamEvent
	Done      chan struct{}
}

func newBroker() *broker { return &broker{subs: map[*Subscription]struct{}{}} }

func (s *Subscription) matches(e *StreamEvent) bool {
	if s.Namespace != "*" && e.Namespace != "" && e.Namespace != s.Namespace {
		return false
	}
	keys, ok := s.Topics[e.Topic]
	if !ok {
		keys, ok = s.Topics["*"]
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

// publish records an event. Callers hold c.Mu.
func (b *broker) publish(e StreamEvent, build func() json.RawMessage) {
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
			case s.Events <- ev:
			default:
				// A subscriber too slow to keep up is dropped, as Nomad closes it.
				delete(b.subs, s)
				close(s.Done)
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

// Subscribe registers a subscription and returns the buffered events it should replay
// first (those at or after fromIndex). Callers hold c.Mu, so payloads can be built.
func (b *broker) Subscribe(s *Subscription, fromIndex uint64) []StreamEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	var replay []StreamEvent
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
		close(s.Done)
	}
	return replay
}

func (b *broker) Unsubscribe(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.Done)
	}
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		delete(b.subs, s)
		close(s.Done)
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// queueEvent records an event of the current hold of c.Mu; a later event about the same
// object in the same hold replaces it. Callers hold c.Mu.
func (c *Cluster) queueEvent(e StreamEvent, build func() json.RawMessage) {
	k := e.Topic + "/" + e.Key
	if i, ok := c.pendingIdx[k]; ok {
		c.pending[i] = pendingEvent{ev: e, build: build}
		return
	}
	c.pendingIdx[k] = len(c.pending)
	c.pending = append(c.pending, pendingEvent{ev: e, build: build})
}

// flushEvents publishes the hold's events; it runs as c.Mu is released.
func (c *Cluster) flushEvents() {
	if len(c.pending) == 0 {
		return
	}
	for i, pe := range c.pending {
		c.Events.publish(pe.ev, pe.build)
		c.pending[i] = pendingEvent{}
	}
	c.pending = c.pending[:0]
	clear(c.pendingIdx)
}

// publishAlloc publishes an Allocation event (payload without the job, as Nomad sends it).
func (c *Cluster) publishAlloc(ar *AllocRun, typ string) {
	keys := []string{ar.Alloc.JobID}
	if ar.Alloc.DeploymentID != "" {
		keys = append(keys, ar.Alloc.DeploymentID)
	}
	c.queueEvent(StreamEvent{Topic: "Allocation", Type: typ, Key: ar.Alloc.ID, Namespace: ar.Alloc.Namespace, FilterKeys: keys, Index: c.Index.Current()},
		func() json.RawMessage {
			cp := *ar.View()
			cp.Job = nil
			return mustJSON(map[string]any{"Allocation": &cp})
		})
}

func (c *Cluster) publishEval(ev *api.Evaluation) {
	keys := []string{ev.JobID}
	if ev.DeploymentID != "" {
		keys = append(keys, ev.DeploymentID)
	}
	c.queueEvent(StreamEvent{Topic: "Evaluation", Type: "EvaluationUpdated", Key: ev.ID, Namespace: ev.Namespace, FilterKeys: keys, Index: c.Index.Current()},
		func() json.RawMessage { return mustJSON(map[string]any{"Evaluation": ev}) })
}

func (c *Cluster) publishDeployment(d *api.Deployment, typ string) {
	c.queueEvent(StreamEvent{Topic: "Deployment", Type: typ, Key: d.ID, Namespace: d.Namespace, FilterKeys: []string{d.JobID}, Index: c.Index.Current()},
		func() json.RawMessage { return mustJSON(map[string]any{"Deployment": d}) })
}

func (c *Cluster) publishJob(j *JobEntry, typ string) {
	job := j.Current()
	c.queueEvent(StreamEvent{Topic: "Job", Type: typ, Key: j.Key.ID, Namespace: j.Key.Namespace, Index: c.Index.Current()},
		func() json.RawMessage { return mustJSON(map[string]any{"Job": job}) })
}
