package agent

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// viewCache holds the records the web page and the status gauges show. It is refreshed
// after each discovery pass (which the page's live streams wait for), else at most every
// ViewMaxAge whoever asks (page views, scrapes); with the Nomad store only the records whose
// head changed since the last pass are read again.
type viewCache struct {
	a *Agent

	mu   sync.Mutex // serialises refreshes
	at   time.Time
	seen uint64 // the page hub's change number at the last refresh
	recs map[string]*restart.Record
	err  error
}

const viewReaders = 16

// records returns the restarts the agent can see, newest first.
func (v *viewCache) records(ctx context.Context) ([]*restart.Record, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	// A discovery pass since the last refresh means records changed: read them again
	// whatever their age, so that the live page shows the change it is woken for.
	seq, _ := v.a.page.next()
	if v.recs == nil || time.Since(v.at) >= v.a.cfg.ViewMaxAge || seq != v.seen {
		v.err = v.refresh(ctx)
		v.at = time.Now()
		v.seen = seq
	}
	out := make([]*restart.Record, 0, len(v.recs))
	for _, r := range v.recs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreateTime.Equal(out[j].CreateTime) {
			return out[i].CreateTime.After(out[j].CreateTime)
		}
		return out[i].ID < out[j].ID
	})
	counts := map[restart.Status]int{}
	for _, r := range out {
		counts[r.Status]++
	}
	v.a.metrics.setStatusCounts(counts)
	return out, v.err
}

func (v *viewCache) refresh(ctx context.Context) error {
	a := v.a
	a.mu.Lock()
	cands, listed := a.last.cands, a.running
	a.mu.Unlock()
	if a.cfg.Discovery == nil || !listed {
		recs, err := a.cfg.Store.List(ctx, store.Filter{Namespace: a.cfg.Namespace})
		if err != nil {
			return err
		}
		fresh := make(map[string]*restart.Record, len(recs))
		for _, r := range recs {
			fresh[r.Namespace+"\x00"+r.ID] = r
		}
		v.recs = fresh
		return nil
	}
	fresh := make(map[string]*restart.Record, len(cands))
	var stale []candidate
	for _, c := range cands {
		if r := v.recs[c.key()]; r != nil && r.ModifyIndex >= c.headIndex {
			fresh[c.key()] = r
		} else {
			stale = append(stale, c)
		}
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, viewReaders)
	)
	for _, c := range stale {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := a.cfg.Store.Get(ctx, c.ns, c.id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
				if old := v.recs[c.key()]; old != nil {
					fresh[c.key()] = old
				}
			default:
				fresh[c.key()] = r
			}
		})
	}
	wg.Wait()
	v.recs = fresh
	return firstErr
}
