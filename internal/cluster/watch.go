package cluster

import (
	"context"

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
