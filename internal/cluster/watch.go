package cluster

import (
	"context"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// JobWatcher watches many allocations of one job at once. *Nomad implements it; an engine
// holding a Cluster can type-assert to it. Which watch suits depends on the batch:
//
//   - WatchAllocation (Cluster): one blocking query per allocation; the fewest bytes
//     (one allocation per change), but one connection each, and Nomad limits a client
//     address to 100 concurrent HTTP connections by default (limits.http_max_conns_per_client).
//     Good for batches of up to a few dozen allocations.
//   - WatchJobAllocations: one blocking query for the job; every answer lists every
//     allocation of the job, so bytes grow with the job's size. Good for small jobs.
//   - StreamJobAllocations: one connection to the event stream; bytes per change stay
//     constant whatever the job's size (two to three times WatchAllocation's in nomadsim,
//     since Nomad sends an event for each allocation of a client's batched update), plus
//     one list of the job per connection. Good for large batches
//     and large jobs.
type JobWatcher interface {
	WatchJobAllocations(ctx context.Context, namespace, jobID string, afterIndex uint64) ([]*restart.Alloc, uint64, error)
	StreamJobAllocations(ctx context.Context, namespace, jobID string, fromIndex uint64) <-chan AllocUpdate
}

var _ JobWatcher = (*Nomad)(nil)
