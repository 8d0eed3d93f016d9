package cluster

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// AllocUpdate is one allocation's new state, or the error that ended a stream.
type AllocUpdate struct {
	// Alloc is nil when Err is set. From the event stream it has no JobVersion unless the
	// allocation was in the job's list when the stream (re)connected: Nomad's event
	// payloads omit the allocation's Job.
	Alloc *restart.Alloc
	// Index is the Raft index of the change (the event's, or the list's on a resync).
	Index uint64
	Err   error
}

// StreamJobAllocations follows the job's allocations through Nomad's event stream
// (topic Allocation:<job>, which Nomad filters by job) from fromIndex, and sends each
// allocation's state every time it changes, until ctx ends or a permanent error (sent as
// the last update, with Err). The channel is closed at the end.
//
// It holds a single connection however many allocations change, and each update costs
// one allocation (about 6 KB with task events) whatever the job's size; Nomad sends
// about 4 events per allocation restarted in place and 8 per stop and replacement. On
// each (re)connection it lists the job's allocations once and sends those changed since
// the last index seen, because Nomad's event buffer may no longer hold them; updates are
// deduplicated by ModifyIndex, so each state is sent once. A silent network failure is
// noticed only through TCP keepalives (the api client hides the stream's heartbeats).
func (n *Nomad) StreamJobAllocations(ctx context.Context, namespace, jobID string, fromIndex uint64) <-chan AllocUpdate {
	out := make(chan AllocUpdate, 16)
	go func() {
		defer close(out)
		s := &allocStream{n: n, ctx: ctx, ns: namespace, job: jobID, out: out, last: fromIndex,
			seen: make(map[string]uint64), versions: make(map[string]uint64)}
		s.run()
	}()
	return out
}

type allocStream struct {
	n        *Nomad
	ctx      context.Context
	ns, job  string
	out      chan<- AllocUpdate
	last     uint64
	seen     map[string]uint64 // alloc ID -> ModifyIndex sent
	versions map[string]uint64 // alloc ID -> JobVersion, from the lists
}

func (s *allocStream) run() {
	attempt := 0
	for {
		err := s.connect()
		if s.ctx.Err() != nil {
			return
		}
		if err != nil && !IsTransient(err) {
			s.send(AllocUpdate{Err: fmt.Errorf("streaming allocation events of job %q: %w", s.job, classify(err, ErrJobNotFound))})
			return
		}
		if err == nil {
			attempt = 0 // the stream ran and ended: reconnect soon
		} else {
			attempt++
			s.n.log.Debug("reconnecting the allocation event stream", "job", s.job, "err", err)
		}
		if !sleepCtx(s.ctx, s.n.retry.backoff(attempt)) {
			return
		}
	}
}

// connect subscribes, resyncs from the job's list, then relays events until the stream
// ends. A nil error means the stream ended without a cause worth reporting.
func (s *allocStream) connect() error {
	sctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	frames, err := s.n.client.EventStream().Stream(sctx,
		map[api.Topic][]string{api.TopicAllocation: {s.job}}, s.last, queryOpts(sctx, s.ns))
	if err != nil {
		return err
	}
	// Subscribed first, listed second: a change lands in one or the other, or both.
	q := queryOpts(sctx, s.ns)
	stubs, qm, err := s.n.client.Jobs().Allocations(s.job, true, q)
	if err != nil {
		return err
	}
	for i := len(stubs) - 1; i >= 0; i-- { // oldest first
		st := stubs[i]
		s.versions[st.ID] = st.JobVersion
		if st.ModifyIndex > s.last && st.ModifyIndex > s.seen[st.ID] {
			s.seen[st.ID] = st.ModifyIndex
			if !s.send(AllocUpdate{Alloc: convertStub(st), Index: qm.LastIndex}) {
				return nil
			}
		}
	}
	s.last = max(s.last, qm.LastIndex)
	for frame := range frames {
		if frame.Err != nil {
			return frame.Err
		}
		for i := range frame.Events {
			ev := &frame.Events[i]
			if ev.Topic != api.TopicAllocation {
				continue
			}
			a, err := ev.Allocation()
			if err != nil || a == nil || a.JobID != s.job || !s.inNamespace(a.Namespace) {
				continue
			}
			if a.ModifyIndex <= s.seen[a.ID] {
				continue
			}
			s.seen[a.ID] = a.ModifyIndex
			ra := convertAlloc(a)
			if v, ok := s.versions[a.ID]; ok && a.Job == nil {
				ra.JobVersion = v
			}
			if !s.send(AllocUpdate{Alloc: ra, Index: frame.Index}) {
				return nil
			}
		}
		s.last = max(s.last, frame.Index)
	}
	return nil
}

// inNamespace reports whether an allocation of namespace ns belongs to the stream.
func (s *allocStream) inNamespace(ns string) bool {
	return s.ns == "" || s.ns == api.AllNamespacesNamespace || ns == "" || ns == s.ns
}

func (s *allocStream) send(u AllocUpdate) bool {
	select {
	case s.out <- u:
		return true
	case <-s.ctx.Done():
		return false
	}
}
