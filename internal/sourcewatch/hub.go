// Package sourcewatch watches the sources of config-change rollouts (internal/onchange's
// Source: Nomad variables and Consul keys, or prefixes of either) and says when what they
// hold changes, so that the agent can restart the jobs whose templates read them.
//
// Nomad variables are watched by their metadata only, with blocking queries on the list
// endpoint (GET /v1/vars?prefix=…): the agent needs the list capability on a path, never
// read, so it never sees a secret. Sources are grouped to spare connections (Nomad allows a
// client address 100 at once, and a blocking query holds one for its whole wait): one query
// per namespace, region and first path segment covers every source of that group, and its
// answer is fanned out to them. Consul keys are watched one blocking query per source
// (GET /v1/kv/<key>, or ?recurse for a prefix: Consul's ?keys form gives no ModifyIndex).
//
// What ACLs can and cannot show: Nomad's list endpoint leaves out the variables a token may
// not list rather than refusing the request (nomad/variables_endpoint.go, List's filter), so
// a token without list on a path sees no variable there, exactly as if none existed; only a
// token Nomad refuses altogether (unknown, expired) gets a 403, which State.Err reports.
// Consul filters a recursive listing the same way (a 403 only where its
// acl.enable_key_list_policy is set); a single key the token may not read is a 403.
//
// Hub.Watch follows sources for as long as its caller needs (the agent); Hub.Read reads
// them once, with the same queries and the same States (`nomad-restart watches`).
//
// Reverts of failed rollouts (nomad-restart.on-failure = "revert", value.go and kept.go) are
// the one use that reads values: the agent reads the whole variable or key of such a job
// (which needs "read" on it), keeps the value a change replaced in a variable of its own, and
// writes it back with check-and-set.
package sourcewatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// State is what a source shows at one moment.
type State struct {
	// Index is the newest ModifyIndex among the entries the source covers; 0: none exists.
	Index uint64
	// Count is how many entries it covers (a deletion lowers it).
	Count int
	// ChangedAt is, for Nomad, the newest ModifyTime among the entries (or when this hub
	// saw a deletion, Nomad giving no time for one); for Consul, when this hub first saw
	// Index (zero for the first observation: Consul keeps no time).
	ChangedAt time.Time
	// Err says the source cannot be watched now (a *DeniedError names the ACL rule to
	// grant; ErrNoConsul says the hub has no Consul); nil otherwise. Index, Count and
	// ChangedAt then keep what was last seen.
	Err error
}

// same reports whether a and b show the same thing to a reader: a change of the entries
// or of the error.
func (a State) same(b State) bool {
	return a.Index == b.Index && a.Count == b.Count && errText(a.Err) == errText(b.Err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Options configure a Hub; the zero value watches Nomad only.
type Options struct {
	// Logger receives the watches' failures; nil logs nothing.
	Logger *slog.Logger
	// Consul returns the client for a datacenter ("" is the local agent's); nil: Consul
	// sources report an error saying that no Consul is configured.
	Consul func(datacenter string) (*consulapi.Client, error)
	// MinGap is the least time between the starts of two queries of one group, so that a
	// source written many times a second costs a few queries; default 250ms.
	MinGap time.Duration
	// RecordsPrefix is where the product keeps its own records, "nomad-restart/" by
	// default: a Nomad prefix source that covers it (such as the whole namespace) does
	// not count them, so that the product's own writes never roll a job.
	RecordsPrefix string
}

// defaultMinGap paces a group's queries when Options.MinGap is zero.
const defaultMinGap = 250 * time.Millisecond

// defaultSlowRetry is how long a group waits before it asks again after an answer that
// will not change by itself (an ACL denial, a bad request): long enough to cost nothing,
// short enough that a fixed policy is picked up within a minute.
const defaultSlowRetry = time.Minute

// Hub watches sources for any number of watchers, each source's query shared by all who
// watch it. It is safe for concurrent use.
type Hub struct {
	// vars reads Nomad's variables for Read, retrying each request; watching, for the
	// groups' watches, tries each once (their loop retries). Both nil without Nomad.
	vars, watching *nomadvars.Client
	opts           Options
	// slowRetry is defaultSlowRetry and readRetry defaultReadRetry; tests shorten them.
	slowRetry time.Duration
	readRetry cluster.RetryPolicy

	mu     sync.Mutex
	groups map[groupKey]*group
}

// New returns a Hub that reads Nomad's variables through vars (nil: no Nomad).
func New(vars *nomadvars.Client, opts Options) *Hub {
	if opts.MinGap <= 0 {
		opts.MinGap = defaultMinGap
	}
	if opts.RecordsPrefix == "" {
		opts.RecordsPrefix = "nomad-restart/"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Hub{opts: opts, slowRetry: defaultSlowRetry, readRetry: defaultReadRetry(), groups: map[groupKey]*group{}}
	if vars != nil {
		h.vars, h.watching = vars, vars.Watching()
	}
	return h
}

// Watch returns a channel that receives src's State once the first answer is in, then at
// every change of it (Index, Count or Err), until ctx ends; then it is closed. A watcher
// that reads slowly receives the newest State, not every one in between. Every Watch of
// the same source shares one query, and sources of one Nomad group share one.
func (h *Hub) Watch(ctx context.Context, src onchange.Source) <-chan State {
	sub := &subscriber{out: make(chan State), wake: make(chan struct{}, 1)}
	g := h.join(src, sub)
	go sub.run(ctx, func() { h.leave(g, src, sub) })
	return sub.out
}

// join adds sub as a watcher of src, starting src's group when it is the first.
func (h *Hub) join(src onchange.Source, sub *subscriber) *group {
	key := keyOf(src)
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.groups[key]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		g = &group{key: key, cancel: cancel, sources: map[onchange.Source]*watched{}}
		h.groups[key] = g
		go h.run(ctx, g)
	}
	w, ok := g.sources[src]
	if !ok {
		w = &watched{subs: map[*subscriber]struct{}{}}
		g.sources[src] = w
		if g.answer != nil { // the group has answered already: src needs no new query
			w.state, w.known = g.answer(src, State{}, false), true
		}
	}
	w.subs[sub] = struct{}{}
	if w.known {
		sub.offer(w.state)
	}
	return g
}

// leave removes sub, and stops the group's query when no one watches the group any more.
func (h *Hub) leave(g *group, src onchange.Source, sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := g.sources[src]
	delete(w.subs, sub)
	if len(w.subs) > 0 {
		return
	}
	delete(g.sources, src)
	if len(g.sources) == 0 {
		delete(h.groups, g.key)
		g.cancel()
	}
}

// run is a group's query loop until ctx ends.
func (h *Hub) run(ctx context.Context, g *group) {
	if g.key.consul {
		h.runConsul(ctx, g)
		return
	}
	h.runNomad(ctx, g)
}

// publish applies a group's answer to each of its sources and offers a source's watchers
// its State when it changed (or is the source's first).
func (h *Hub) publish(g *group, answer answerFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g.answer = answer
	for src, w := range g.sources {
		next := answer(src, w.state, w.known)
		if w.known && next.same(w.state) {
			continue
		}
		w.state, w.known = next, true
		for sub := range w.subs {
			sub.offer(next)
		}
	}
}

// publishErr keeps every source's last State and sets its Err: err as it applies to it.
func (h *Hub) publishErr(g *group, err error) {
	h.publish(g, failedAnswer(err))
}

// failedAnswer is a group's failure as it applies to each of its sources: their last
// State, with err worded for the source (sourceErr).
func failedAnswer(err error) answerFunc {
	return func(src onchange.Source, prev State, _ bool) State {
		prev.Err = sourceErr(src, err)
		return prev
	}
}

// answerFunc is a group's latest answer as it applies to one of its sources: the source's
// new State given its previous one (known false: none yet).
type answerFunc func(src onchange.Source, prev State, known bool) State

// groupKey identifies one shared query: a Nomad listing (namespace, region, prefix) or a
// Consul source.
type groupKey struct {
	consul            bool
	namespace, region string
	prefix            string
	// source is the Consul source itself (Consul sources are not grouped).
	source onchange.Source
}

// keyOf is the group that watches src.
func keyOf(src onchange.Source) groupKey {
	if src.Kind.Nomad() {
		return groupKey{namespace: src.Namespace, region: src.Region, prefix: groupPrefix(src.Path)}
	}
	return groupKey{consul: true, source: src}
}

// group is one shared query and the sources it answers; its fields but key and cancel are
// guarded by the Hub's mutex.
type group struct {
	key    groupKey
	cancel context.CancelFunc

	sources map[onchange.Source]*watched
	// answer is the latest answer, for a source that joins later; nil before the first.
	answer answerFunc
}

// watched is one source of a group: its last State and who watches it.
type watched struct {
	state State
	known bool
	subs  map[*subscriber]struct{}
}

// subscriber is one Watch: the newest State not yet delivered, and the channel it goes to.
// Offering never blocks, so a slow reader never holds up its group's other sources.
type subscriber struct {
	out  chan State
	wake chan struct{} // holds one token while a State waits

	mu      sync.Mutex
	pending State
	has     bool
}

// offer makes st the next State to deliver, replacing one not yet delivered.
func (s *subscriber) offer(st State) {
	s.mu.Lock()
	s.pending, s.has = st, true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) take() (State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.pending, s.has
	s.has = false
	return st, ok
}

// run delivers offered States until ctx ends, then leaves and closes the channel.
func (s *subscriber) run(ctx context.Context, leave func()) {
	defer close(s.out)
	defer leave()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		st, ok := s.take()
		if !ok {
			continue
		}
		select {
		case s.out <- st:
		case <-ctx.Done():
			return
		}
	}
}
