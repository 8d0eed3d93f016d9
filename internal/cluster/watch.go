package cluster

import (
	"context"
	"log/slog"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// JobAllocWatcher and AllocFollower watch many allocations of one job at once. Which watch
// suits depends on the batch:
//
//   - WatchAllocation (AllocReader): one blocking query per allocation; the fewest bytes
//     (one allocation per change), but one connection each, and Nomad limits a client
//     address to 100 concurrent HTTP connections by default (limits.http_max_conns_per_client).
//     Good for batches of up to a few dozen allocations.
//   - WatchJobAllocations: one blocking query for the job; every answer lists every
//     allocation of the job, so bytes grow with the job's size. Good for small jobs.
//   - FollowJobAllocations: one connection to the event stream; bytes per change stay
//     constant whatever the job's size (two to three times WatchAllocation's in nomadsim,
//     since Nomad sends an event for each allocation of a client's batched update), plus
//     one list of the job per connection. Good for large batches and large jobs.
type JobAllocWatcher interface {
	// WatchJobAllocations blocks until an allocation of the job changed past afterIndex
	// (0: at once), then lists the job's allocations and returns the index to watch from.
	WatchJobAllocations(ctx context.Context, namespace, jobID string, afterIndex uint64) ([]*restart.Alloc, uint64, error)
}

// AllocFollower follows a job's allocations through an event stream (see JobAllocWatcher).
type AllocFollower interface {
	// FollowJobAllocations streams the job's allocation changes from fromIndex, with
	// Synced and Gap markers (see AllocUpdate), until ctx ends or the stream fails (an
	// update with Err, then the channel closes). It returns nil when the client has no
	// event stream: the caller watches with blocking queries instead.
	FollowJobAllocations(ctx context.Context, namespace, jobID string, fromIndex uint64) <-chan AllocUpdate
}

var (
	_ JobAllocWatcher = (*Nomad)(nil)
	_ AllocFollower   = (*Nomad)(nil)
)

// Watch is the project's one blocking-query loop: it follows something Nomad or Consul
// answers with an index (a listing, a service's checks) by asking again with the index of
// the last answer, which the server holds until something changes or its wait ends. The
// query (see Run) sends the request and handles the answer; Watch keeps the rules every
// such loop needs:
//
//   - The index. The first query waits on 0, which answers at once. An answer whose index
//     went backwards (a new leader behind the old one, a restored snapshot) starts over
//     from 0, and an answer at 0 is taken as 1, since a query at 0 never blocks and the
//     loop would spin: Consul's documented rules, which Nomad's blocking queries share.
//     A failed query starts over from 0 too: its index may belong to a leader that is gone,
//     and the answer at once shows what changed during the failure.
//   - Backoff after failures: Policy's capped exponential backoff with jitter (Backoff),
//     reset by an answer. Its MaxElapsed is ignored: a watch gives up only when its
//     context ends.
//   - Pacing: at least MinGap between the starts of two queries, so that what changes many
//     times a second costs a few answers.
//   - Logs: one Warn at the first failure of a streak ("<What> failed; retrying") and one
//     Info when a query works again, never a line per retry: a token without permission
//     would otherwise log at every backoff, for good.
//
// A Watch keeps its index, pace, backoff and failure streak between calls of Run, so that
// a watch stopped and run again (the store's shared watch queries only while someone waits)
// resumes where it was. Run must not be called concurrently on one Watch.
type Watch struct {
	// What names what is watched, for logs: "listing schedules".
	What string
	// Log receives the failure streaks; nil logs nothing.
	Log *slog.Logger
	// Policy paces the retries after failures; zero fields take DefaultRetryPolicy's.
	Policy RetryPolicy
	// MinGap is the least time between the starts of two queries; 0: no pacing.
	MinGap time.Duration

	index   uint64
	sent    time.Time // when the last query started
	backoff Backoff
	// failingSince is when the current streak of failures began; zero: none.
	failingSince time.Time
}

// Run sends query again and again until ctx ends. Each call waits on index (0: answer at
// once), handles the answer and returns the answer's index, or an error when the query
// failed. The query may report its errors to whoever needs them (an error snapshot, a
// page's warning); Run logs them (see Watch) and retries after a backoff. When ctx has
// ended, Run returns without counting the query's error as a failure; an answer handled
// when ctx ended still moves the index.
func (w *Watch) Run(ctx context.Context, query func(ctx context.Context, index uint64) (uint64, error)) {
	w.backoff.policy = w.Policy
	w.backoff.policy.MaxElapsed = 0 // a watch never gives up while ctx lives
	for Sleep(ctx, time.Until(w.sent.Add(w.MinGap))) {
		w.sent = time.Now()
		next, err := query(ctx, w.index)
		if err != nil {
			if ctx.Err() != nil {
				return // ended, not failed: the index still holds
			}
			w.failed(err)
			w.index = 0 // the index may belong to a leader that is gone
			if !w.backoff.Wait(ctx) {
				return
			}
			continue
		}
		w.recovered()
		w.backoff.Reset()
		w.index = nextIndex(w.index, next)
	}
}

// failed logs err if it starts a streak of failures.
func (w *Watch) failed(err error) {
	if !w.failingSince.IsZero() {
		return
	}
	w.failingSince = time.Now()
	if w.Log != nil {
		w.Log.Warn(w.What+" failed; retrying", "err", err)
	}
}

// recovered ends a streak of failures, if one runs, and logs its end.
func (w *Watch) recovered() {
	if w.failingSince.IsZero() {
		return
	}
	if w.Log != nil {
		w.Log.Info(w.What+" works again", "failed_for", time.Since(w.failingSince).Round(time.Millisecond))
	}
	w.failingSince = time.Time{}
}

// nextIndex is the index to wait on after an answer at got to a query that waited on prev.
func nextIndex(prev, got uint64) uint64 {
	switch {
	case got == 0:
		return 1 // a query at 0 never blocks
	case got < prev:
		return 0 // the index went backwards: start over
	}
	return got
}

// Sleep waits d, or less when ctx ends first, and reports whether ctx is still live; a d
// of zero or less returns at once. It is the project's one context-aware pause.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}
