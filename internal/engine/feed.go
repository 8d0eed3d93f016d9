package engine

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// maxFeeds bounds the event streams one process holds (one per driver that has one): a
// stream holds a connection for the driver's life, and Nomad limits a client address to 100
// connections. Drivers beyond it follow their allocations with blocking queries.
const maxFeeds = 8

// errFeedMiss says the feed cannot answer for an allocation now (it is not synced, it holds
// no state of that allocation newer than the caller's, or it ended): the caller reads
// Nomad instead, for this once.
var errFeedMiss = errors.New("the allocation feed cannot answer")

// allocFeed keeps the job's allocations current from one event stream of the job, instead
// of a read before each request and a blocking query per allocation after it: a batch of
// 100 then waits on one connection, with no request per change and no limit on how many
// wait at once.
//
// It keeps every allocation's state in brief (each task's newest event only: what an
// intent's observation and the eligibility checks read), and the full state of pinned
// allocations (those being followed), whose task events the waits judge. What it holds is
// as current as a read while it is synced: every change since the stream subscribed is
// applied, and a lost connection is resynced from the job's list before it answers again.
type allocFeed struct {
	mu     sync.Mutex
	synced bool
	ended  bool
	// firstSync is closed once the feed synced the first time, or ended.
	firstSync chan struct{}
	index     map[string]uint64               // every allocation seen: its ModifyIndex
	brief     map[string]*briefAlloc          // every allocation seen, task events cut to the newest
	groups    map[string]cluster.GroupSummary // the briefs counted by group and status
	pinned    map[string]int                  // allocation ID -> pins
	// adopted maps a pinned allocation to its replacement, pinned with it when the stream
	// showed the replacement's creation: its full state is then at hand when the driver
	// turns to follow it.
	adopted map[string]string
	latest  map[string]*restart.Alloc // the newest full state of pinned allocations
	wake    map[string]chan struct{}  // closed at the allocation's next change
	anyway  chan struct{}             // closed when the feed's state changes (sync, gap, end)
	facts   jobFacts                  // the job and its deployments (feed_job.go)
}

// startFeed follows the job's allocations until ctx ends; nil where the cluster has no event
// stream or the process holds maxFeeds already (the driver then uses blocking queries).
func (e *Engine) startFeed(ctx context.Context, namespace, jobID string) *allocFeed {
	select {
	case e.feeds <- struct{}{}:
	default:
		return nil
	}
	sctx, stop := context.WithCancel(ctx)
	updates := e.cluster.FollowJobAllocations(sctx, namespace, jobID, 0)
	if updates == nil {
		stop()
		<-e.feeds
		return nil
	}
	feed := newAllocFeed()
	e.log.Debug("following the job's allocations through Nomad's event stream", "job", jobID)
	go func() {
		defer func() { <-e.feeds }()
		defer feed.end()
		defer stop()
		var gaps []time.Time
		for u := range updates {
			switch {
			case u.Err != nil:
				e.log.Warn("the job's allocation event stream ended; following allocations with blocking queries", "job", jobID, "err", u.Err)
				return
			case u.Gap && tooManyGaps(&gaps, time.Now()):
				// Each reconnection lists the job again: a stream cut again and again (a
				// proxy that does not hold it, say) would cost more than it saves.
				e.log.Warn("the job's allocation event stream keeps breaking; following allocations with blocking queries", "job", jobID, "breaks", len(gaps))
				return
			case u.Synced, u.Gap:
				e.log.Debug("allocation event stream", "job", jobID, "synced", u.Synced, "index", u.Index)
				feed.setSynced(u.Synced)
			case u.Alloc != nil:
				feed.apply(u.Alloc)
			case u.Job != nil || u.JobGone:
				feed.applyJob(u.Job, u.JobGone)
			case u.Deployment != nil:
				feed.applyDeployment(*u.Deployment)
			}
		}
	}()
	return feed
}

// maxFeedGaps lost connections within feedGapWindow end a feed.
const (
	maxFeedGaps   = 5
	feedGapWindow = time.Minute
)

// tooManyGaps records a lost connection at now and reports whether the stream broke
// maxFeedGaps times within feedGapWindow.
func tooManyGaps(gaps *[]time.Time, now time.Time) bool {
	kept := (*gaps)[:0]
	for _, t := range *gaps {
		if now.Sub(t) < feedGapWindow {
			kept = append(kept, t)
		}
	}
	*gaps = append(kept, now)
	return len(*gaps) >= maxFeedGaps
}

func newAllocFeed() *allocFeed {
	return &allocFeed{index: map[string]uint64{}, brief: map[string]*briefAlloc{}, groups: map[string]cluster.GroupSummary{}, pinned: map[string]int{}, adopted: map[string]string{},
		latest: map[string]*restart.Alloc{}, wake: map[string]chan struct{}{}, anyway: make(chan struct{}),
		firstSync: make(chan struct{})}
}

func (f *allocFeed) setSynced(synced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !synced {
		f.forgetJobLocked()
	}
	if f.synced != synced {
		f.synced = synced
		f.wakeAllLocked()
	}
	if synced {
		f.closeFirstSyncLocked()
	}
}

func (f *allocFeed) closeFirstSyncLocked() {
	select {
	case <-f.firstSync:
	default:
		close(f.firstSync)
	}
}

// awaitFirstSync waits up to limit for the feed's first sync (the job's list read after
// subscribing), so that a driver's first batch is observed from it rather than read
// allocation by allocation.
func (f *allocFeed) awaitFirstSync(ctx context.Context, limit time.Duration) {
	if f == nil {
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-f.firstSync:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (f *allocFeed) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended, f.synced = true, false
	f.latest, f.brief, f.groups = map[string]*restart.Alloc{}, map[string]*briefAlloc{}, map[string]cluster.GroupSummary{}
	f.closeFirstSyncLocked()
	f.wakeAllLocked()
}

func (f *allocFeed) wakeAllLocked() {
	close(f.anyway)
	f.anyway = make(chan struct{})
	for id, ch := range f.wake {
		close(ch)
		delete(f.wake, id)
	}
}

// apply takes one allocation's new state from the stream.
func (f *allocFeed) apply(a *restart.Alloc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offerLocked(a)
}

// offer takes an allocation read from Nomad, so that a pinned one's state is the newest
// of reads and events.
func (f *allocFeed) offer(a *restart.Alloc) {
	if f == nil || a == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offerLocked(a)
}

// offerLocked takes a new state of an allocation.
func (f *allocFeed) offerLocked(a *restart.Alloc) {
	if f.ended || a.ModifyIndex < f.index[a.ID] {
		return
	}
	f.index[a.ID] = a.ModifyIndex
	if prev := a.PreviousAllocation; f.pinned[a.ID] == 0 && prev != "" && f.pinned[prev] > 0 && f.adopted[prev] == "" {
		f.adopted[prev] = a.ID
		f.pinned[a.ID]++
	}
	if prev := f.brief[a.ID]; prev != nil {
		f.count(prev.alloc.Group, prev.alloc.ClientStatus, -1)
	}
	f.count(a.Group, a.ClientStatus, 1)
	f.brief[a.ID] = inBrief(a)
	if f.pinned[a.ID] == 0 {
		return
	}
	if cur := f.latest[a.ID]; cur != nil && cur.ModifyIndex >= a.ModifyIndex {
		return
	}
	f.latest[a.ID] = a
	if ch, ok := f.wake[a.ID]; ok {
		close(ch)
		delete(f.wake, a.ID)
	}
}

// briefAlloc is an allocation with only each task's newest event, which is all that an
// intent's observation (restart.Observe), the targeted tasks and the eligibility checks
// read; its tasks are a slice, not a map (a map of one task state takes a kilobyte), so
// that a 10,000-allocation job's states take a few MB.
type briefAlloc struct {
	alloc restart.Alloc // Tasks nil
	tasks []briefTask
}

type briefTask struct {
	name  string
	state restart.TaskState // Events: the newest at most
}

func inBrief(a *restart.Alloc) *briefAlloc {
	b := &briefAlloc{alloc: *a}
	b.alloc.Tasks = nil
	if a.Tasks != nil {
		b.tasks = make([]briefTask, 0, len(a.Tasks))
	}
	for name, ts := range a.Tasks {
		if n := len(ts.Events); n > 0 {
			newest := ts.Events[0]
			for _, e := range ts.Events[1:] {
				if e.Time.After(newest.Time) {
					newest = e
				}
			}
			ts.Events = []restart.TaskEvent{newest}
		}
		b.tasks = append(b.tasks, briefTask{name: name, state: ts})
	}
	return b
}

// expand returns the allocation the brief stands for (a new one: callers may keep it).
func (b *briefAlloc) expand() *restart.Alloc {
	a := b.alloc
	if b.tasks != nil {
		a.Tasks = make(map[string]restart.TaskState, len(b.tasks))
		for _, t := range b.tasks {
			a.Tasks[t.name] = t.state
		}
	}
	return &a
}

// pin makes the feed keep the allocations' states from now on; unpin lets them go.
func (f *allocFeed) pin(ids ...string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.pinned[id]++
	}
}

func (f *allocFeed) unpin(ids ...string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(ids) > 0 {
		id := ids[0]
		ids = ids[1:]
		if f.pinned[id]--; f.pinned[id] <= 0 {
			delete(f.pinned, id)
			delete(f.latest, id)
			if next, ok := f.adopted[id]; ok {
				delete(f.adopted, id)
				ids = append(ids, next)
			}
		}
	}
}

// observed returns an allocation's state as current as a read, with each task's newest
// event at least (see allocFeed), if the feed has it.
func (f *allocFeed) observed(id string) (*restart.Alloc, bool) {
	return f.current(id, func() *restart.Alloc {
		if b := f.brief[id]; b != nil {
			return b.expand()
		}
		return nil
	})
}

// count keeps the groups' counts by client status as allocations change (see groupCounts).
func (f *allocFeed) count(group, clientStatus string, delta int) {
	g := f.groups[group]
	switch clientStatus {
	case restart.ClientRunning:
		g.Running += delta
	case restart.ClientPending:
		g.Starting += delta
	default:
		return
	}
	f.groups[group] = g
}

// groupCounts returns the job's allocations counted by group and client status, as Nomad's
// job summary counts them (Running and Starting; Queued stays 0: a group with queued
// allocations runs fewer than its count), if the feed is synced.
func (f *allocFeed) groupCounts() (map[string]cluster.GroupSummary, bool) {
	return whenSynced(f, func() (map[string]cluster.GroupSummary, bool) { return maps.Clone(f.groups), true })
}

// held returns a pinned allocation's full state if the feed holds one as current as a read.
func (f *allocFeed) held(id string) (*restart.Alloc, bool) {
	return f.current(id, func() *restart.Alloc { return f.latest[id] })
}

// current returns the state of allocation id that state finds in the feed (nil: none), if
// the feed has seen no change of the allocation since that state and is synced.
func (f *allocFeed) current(id string, state func() *restart.Alloc) (*restart.Alloc, bool) {
	return whenSynced(f, func() (*restart.Alloc, bool) {
		a := state()
		if a == nil || f.index[id] > a.ModifyIndex {
			return nil, false
		}
		return a, true
	})
}

// whenSynced returns what read finds, read under the feed's lock, if the feed is synced (a
// nil feed never is): the one condition on which what the feed holds is as current as a read.
func whenSynced[T any](f *allocFeed, read func() (T, bool)) (T, bool) {
	var none T
	if f == nil {
		return none, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.synced {
		return none, false
	}
	return read()
}

// wait returns the allocation once the feed holds a state of it with a ModifyIndex above
// after. errFeedMiss: the feed cannot tell (not synced, ended, or it saw a change of an
// allocation whose state it did not hold); the caller reads Nomad for this once.
func (f *allocFeed) wait(ctx context.Context, id string, after uint64) (*restart.Alloc, error) {
	f.pin(id)
	defer f.unpin(id)
	for {
		f.mu.Lock()
		if !f.synced {
			f.mu.Unlock()
			return nil, errFeedMiss
		}
		a := f.latest[id]
		if a != nil && a.ModifyIndex > after && a.ModifyIndex >= f.index[id] {
			f.mu.Unlock()
			return a, nil
		}
		if (a == nil && f.index[id] > after) || (a != nil && f.index[id] > a.ModifyIndex) {
			f.mu.Unlock()
			return nil, errFeedMiss
		}
		ch, ok := f.wake[id]
		if !ok {
			ch = make(chan struct{})
			f.wake[id] = ch
		}
		anyway := f.anyway
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		case <-anyway:
		}
	}
}
