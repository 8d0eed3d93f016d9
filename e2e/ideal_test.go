package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// idealBatches restarts up to batches batches of size allocations of the job the way
// no graceful driver can beat on this cluster: before the first batch (outside the timed
// spans) it lists the job once for the restart counters and subscribes to the job's
// allocation events; then each batch only sends its requests, all at once through a pool
// of 64 connections (Nomad's limit of 100 per client address leaves no more), and ends the
// instant the events show the last allocation running again (with -reschedule: its
// replacement running). No reads, no record, no checks. Its batch span is the simulation's
// own time for a batch of requests: their handling, the restarts, the clients' syncs to
// the servers, and the connection limit's queueing. What nomad-restart's span adds to it
// is the tool's cost.
func idealBatches(ctx context.Context, addr string, job string, resched bool, size, batches int) ([]idealBatch, error) {
	client, stubs, done, err := baselineStart(ctx, addr, job)
	if err != nil {
		return nil, err
	}
	defer done()
	before := map[string]uint64{}
	var ids []string
	for _, s := range stubs {
		ids = append(ids, s.ID)
		if ts := s.TaskStates["main"]; ts != nil {
			before[s.ID] = ts.Restarts
		}
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	updates := cluster.NewNomad(client).FollowJobAllocations(sctx, "default", job, 0)
	var mu sync.Mutex
	pending := map[string]bool{} // the batch in flight's allocations not yet running again
	batchDone := make(chan struct{}, 1)
	synced := make(chan struct{})
	go func() {
		var once sync.Once
		for u := range updates {
			if u.Synced {
				once.Do(func() { close(synced) })
			}
			a := u.Alloc
			if a == nil {
				continue
			}
			key := a.ID
			ready := a.ClientStatus == restart.ClientRunning && a.Tasks["main"].State == restart.TaskRunning
			if resched {
				key, ready = a.PreviousAllocation, ready && a.PreviousAllocation != ""
			} else {
				ready = ready && a.Tasks["main"].Restarts > before[a.ID]
			}
			mu.Lock()
			if ready && pending[key] {
				delete(pending, key)
				if len(pending) == 0 {
					batchDone <- struct{}{}
				}
			}
			mu.Unlock()
		}
	}()
	select {
	case <-synced:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var out []idealBatch
	for b := 0; b < batches && (b+1)*size <= len(ids); b++ {
		batch := ids[b*size : (b+1)*size]
		mu.Lock()
		for _, id := range batch {
			pending[id] = true
		}
		mu.Unlock()
		start := time.Now()
		errs := make(chan error, len(batch))
		for _, id := range batch {
			go func() {
				a := &api.Allocation{ID: id}
				q := (&api.QueryOptions{}).WithContext(ctx)
				var err error
				if resched {
					_, err = client.Allocations().Stop(a, q)
				} else {
					err = client.Allocations().Restart(a, "", q)
				}
				if err != nil {
					errs <- fmt.Errorf("allocation %s: %w", id, err)
				}
			}()
		}
		select {
		case <-batchDone:
		case err := <-errs:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out = append(out, idealBatch{start: start, span: time.Since(start), ids: batch})
	}
	return out, nil
}

// idealBatch is one batch of idealBatches: when it started, how long it took, and its
// allocations.
type idealBatch struct {
	start time.Time
	span  time.Duration
	ids   []string
}

func idealSpans(bs []idealBatch) []time.Duration {
	out := make([]time.Duration, len(bs))
	for i, b := range bs {
		out[i] = b.span
	}
	return out
}

// idealTimeline is, from each batch's start (medians over the batches), its first and last
// restart signal (with -reschedule: kill), its last task start, and the last start known to
// the servers, as batchLatency's timeline.
func idealTimeline(c *nomadsim.Cluster, client *api.Client, bs []idealBatch, resched bool) ([4]time.Duration, error) {
	nowReal, nowSim, scale := time.Now(), c.Now().UnixNano(), c.TimeScale()
	realAt := func(simNanos int64) time.Time {
		return nowReal.Add(-time.Duration(float64(nowSim-simNanos) / scale))
	}
	var tl [4][]time.Duration
	for _, b := range bs {
		var first, lastSig, lastStart, lastKnown int64
		for _, id := range b.ids {
			p := restart.AllocProgress{ID: id}
			if resched {
				a, _, err := client.Allocations().Info(id, nil)
				if err != nil {
					return [4]time.Duration{}, err
				}
				p.Replacement = a.NextAllocation
			}
			t, err := simRestartTime(client, p, resched)
			if err != nil {
				return [4]time.Duration{}, err
			}
			if first == 0 || t.signal < first {
				first = t.signal
			}
			lastSig, lastStart, lastKnown = max(lastSig, t.signal), max(lastStart, t.started), max(lastKnown, t.known)
		}
		for k, at := range []int64{first, lastSig, lastStart, lastKnown} {
			tl[k] = append(tl[k], realAt(at).Sub(b.start))
		}
	}
	var out [4]time.Duration
	for k := range tl {
		out[k] = quantile(tl[k], 0.5)
	}
	return out, nil
}
