package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// AllocUpdate is one allocation's new state, or the error that ended a stream.
type AllocUpdate struct {
	// Alloc is nil when Err is set. From the event stream it has no JobVersion unless the
	// allocation was in the job's list when the stream (re)connected: Nomad's event
	// payloads omit the allocation's Job.
	Alloc *restart.Alloc
	// Index is the Raft index of the change (the event's; on a resync from the list, the
	// allocation's ModifyIndex).
	Index uint64
	Err   error
	// Synced and Gap mark the stream's state (FollowJobAllocations only; Alloc is nil):
	// Synced, after each (re)connection, says every change up to Index has been sent; Gap
	// says the connection was lost, so changes may be missing until the next Synced.
	Synced, Gap bool
	// Job and Deployment (FollowJobAllocations only; Alloc is nil) are the job and one of
	// its deployments as the stream's Job and Deployment events carried them, current as
	// of Index; JobGone says a Job event deregistered the job (stopped or purged: a read
	// tells which).
	Job        *restart.Job
	JobGone    bool
	Deployment *Deployment
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
// deduplicated by ModifyIndex, so each state is sent once. A stream that brings nothing,
// not even Nomad's heartbeat, for much longer than the heartbeat's period is taken for dead
// and reconnected (the client's Guard).
func (n *Nomad) StreamJobAllocations(ctx context.Context, namespace, jobID string, fromIndex uint64) <-chan AllocUpdate {
	return n.streamJobAllocations(ctx, namespace, jobID, fromIndex, false)
}

// FollowJobAllocations is StreamJobAllocations with the stream's state in between: an
// update with Synced after each (re)connection's resync, and one with Gap when a
// connection is lost. A follower that keeps allocations current from the stream knows
// from them when what it holds is as current as a read would be. The same connection
// also carries the job's Job and Deployment events (topics Job:<job>, which Nomad matches
// on the job's ID, and Deployment:<job>, matched on the deployment's job): between a Gap
// and the next Synced none is missed either, so a follower that read the job or its
// deployments while synced knows every later change of them.
func (n *Nomad) FollowJobAllocations(ctx context.Context, namespace, jobID string, fromIndex uint64) <-chan AllocUpdate {
	return n.streamJobAllocations(ctx, namespace, jobID, fromIndex, true)
}

func (n *Nomad) streamJobAllocations(ctx context.Context, namespace, jobID string, fromIndex uint64, markers bool) <-chan AllocUpdate {
	out := make(chan AllocUpdate, 64)
	go func() {
		defer close(out)
		s := &allocStream{n: n, ctx: ctx, ns: namespace, job: jobID, out: out, last: fromIndex, markers: markers,
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
	markers  bool              // send Synced and Gap
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
		if s.markers && !s.send(AllocUpdate{Gap: true, Index: s.last}) {
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
		if !Sleep(s.ctx, s.n.retry.backoff(attempt)) {
			return
		}
	}
}

// allocFrame is one frame of Nomad's event stream as far as allocations go. The api
// client's EventStream decodes each payload into a map and then into the allocation with
// mapstructure, which took a third of a driver's CPU at 100 allocations a batch; decoding
// straight into the fields the engine reads (eventAlloc) costs a fraction of it. A
// heartbeat is "{}": no events.
type allocFrame struct {
	Index  uint64
	Events []struct {
		Topic   api.Topic
		Type    string
		Payload struct {
			Allocation *eventAlloc
			// Job and Deployment are decoded whole: they come once per change of the job
			// or a deployment, not per allocation.
			Job        *api.Job
			Deployment *api.Deployment
			// Deleted marks a Job event of a purge (its Job is the job before).
			Deleted bool
		}
	}
}

// eventAlloc is the part of an event's allocation (api.Allocation's JSON) that convertAlloc
// reads; the rest (resources, metrics, the job's specification) is skipped undecoded.
type eventAlloc struct {
	ID, Name, Namespace, JobID, TaskGroup, NodeID, NodeName string
	DesiredStatus, ClientStatus                             string
	NextAllocation, PreviousAllocation                      string
	CreateIndex, ModifyIndex                                uint64
	TaskStates                                              map[string]*api.TaskState
	Job                                                     *struct{ Version *uint64 }
}

func (a *eventAlloc) convert() *restart.Alloc {
	out := &restart.Alloc{
		ID: a.ID, Name: a.Name, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup,
		NodeID: a.NodeID, NodeName: a.NodeName, DesiredStatus: a.DesiredStatus, ClientStatus: a.ClientStatus,
		NextAllocation: a.NextAllocation, PreviousAllocation: a.PreviousAllocation,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, Tasks: convertTaskStates(a.TaskStates),
	}
	if a.Job != nil {
		out.JobVersion = u64(a.Job.Version)
	}
	return out
}

// connect subscribes, resyncs from the job's list, then relays events until the stream
// ends. A nil error means the stream ended without a cause worth reporting.
func (s *allocStream) connect() error {
	sctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	q := queryOpts(sctx, s.ns)
	q.Params = map[string]string{"index": strconv.FormatUint(s.last, 10)}
	body, err := s.n.client.Raw().Response("/v1/event/stream?"+s.topics(), q)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	// Subscribed first, listed second: a change lands in one or the other, or both. The
	// list is decoded as it arrives (a 10,000-allocation job's is tens of megabytes), so
	// it comes without its index: the newest ModifyIndex in it stands for it, which can
	// only make the next reconnection replay more.
	list, err := s.n.client.Raw().Response("/v1/job/"+url.PathEscape(s.job)+"/allocations?all=true", queryOpts(sctx, s.ns))
	if err != nil {
		return err
	}
	listed := s.last
	ended := false
	err = eachStub(list, func(st *api.AllocationListStub) bool {
		s.versions[st.ID] = st.JobVersion
		listed = max(listed, st.ModifyIndex)
		if st.ModifyIndex > s.last && st.ModifyIndex > s.seen[st.ID] {
			s.seen[st.ID] = st.ModifyIndex
			if !s.send(AllocUpdate{Alloc: convertStub(st), Index: st.ModifyIndex}) {
				ended = true
				return false
			}
		}
		return true
	})
	_ = list.Close()
	if ended {
		return nil
	}
	if err != nil {
		return err
	}
	s.last = listed
	if s.markers && !s.send(AllocUpdate{Synced: true, Index: s.last}) {
		return nil
	}
	dec := json.NewDecoder(body)
	for {
		var frame allocFrame
		if err := dec.Decode(&frame); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for i := range frame.Events {
			ev := &frame.Events[i]
			if ev.Topic == api.TopicJob || ev.Topic == api.TopicDeployment {
				gone := ev.Payload.Deleted || ev.Type == "JobDeregistered" || ev.Type == "JobBatchDeregistered"
				if !s.relayJobEvent(ev.Topic, gone, ev.Payload.Job, ev.Payload.Deployment, frame.Index) {
					return nil
				}
				continue
			}
			a := ev.Payload.Allocation
			if ev.Topic != api.TopicAllocation || a == nil || a.JobID != s.job || !s.inNamespace(a.Namespace) {
				continue
			}
			if a.ModifyIndex <= s.seen[a.ID] {
				continue
			}
			s.seen[a.ID] = a.ModifyIndex
			ra := a.convert()
			if v, ok := s.versions[a.ID]; ok && a.Job == nil {
				ra.JobVersion = v
			}
			if !s.send(AllocUpdate{Alloc: ra, Index: frame.Index}) {
				return nil
			}
		}
		s.last = max(s.last, frame.Index)
	}
}

// topics is the stream's query: the job's allocations, and with markers its Job and
// Deployment events too (a follower keeps them; the same ACL capability, read-job, grants
// all three, so they cannot fail one another).
func (s *allocStream) topics() string {
	q := url.Values{"topic": {string(api.TopicAllocation) + ":" + s.job}}
	if s.markers {
		q.Add("topic", string(api.TopicJob)+":"+s.job)
		q.Add("topic", string(api.TopicDeployment)+":"+s.job)
	}
	return q.Encode()
}

// relayJobEvent sends a Job or Deployment event of the stream's job (markers only); false
// when the stream's context ended. Nomad sends a Job event for every change of the job
// (registered, its status moved by its allocations, deregistered: stopped or purged), of
// the type of the write that made it; gone marks the deregistrations.
func (s *allocStream) relayJobEvent(topic api.Topic, gone bool, job *api.Job, dep *api.Deployment, index uint64) bool {
	switch {
	case !s.markers:
		return true
	case topic == api.TopicJob && job != nil && str(job.ID) == s.job && s.inNamespace(str(job.Namespace)):
		if gone || (job.Stop != nil && *job.Stop) {
			return s.send(AllocUpdate{JobGone: true, Index: index})
		}
		return s.send(AllocUpdate{Job: convertJob(job), Index: index})
	case topic == api.TopicDeployment && dep != nil && dep.JobID == s.job && s.inNamespace(dep.Namespace):
		return s.send(AllocUpdate{Deployment: &Deployment{ID: dep.ID, Status: dep.Status, ModifyIndex: dep.ModifyIndex}, Index: index})
	}
	return true
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
