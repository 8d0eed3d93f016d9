package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// minimalBatches restarts up to batches batches of benchBatch allocations of the job the
// way the least a graceful driver can do it: no record, no lease, no events; per
// allocation one read (the restart counter to compare with), the request, and blocking
// reads until the task runs again (with -reschedule: the stop, then the replacement chain
// until the replacement runs). It returns each batch's duration. Run on the same cluster
// and job right after nomad-restart, it tells how much of a batch's time is the
// simulation's and the request round trips' that any driver pays, and so what
// nomad-restart adds beyond them.
func minimalBatches(ctx context.Context, addr string, job string, resched bool, batches int) ([]time.Duration, error) {
	client, stubs, done, err := baselineStart(ctx, addr, job)
	if err != nil {
		return nil, err
	}
	defer done()
	var ids []string
	for _, s := range stubs {
		ids = append(ids, s.ID)
	}
	var out []time.Duration
	for b := 0; b < batches && (b+1)*benchBatch <= len(ids); b++ {
		start := time.Now()
		errs := make(chan error, benchBatch)
		var wg sync.WaitGroup
		for _, id := range ids[b*benchBatch : (b+1)*benchBatch] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := minimalOne(ctx, client, id, resched); err != nil {
					errs <- fmt.Errorf("allocation %s: %w", id, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// baselineStart is a baseline driver's client and the job's running allocations. The
// client keeps a pool of at most 64 connections, as nomad-restart's: under Nomad's limit of
// 100 per client address (nomadsim enforces it here), which one connection per allocation
// of a batch of 100 passes. done closes its idle connections, which still count against the
// address's limit once it is done.
func baselineStart(ctx context.Context, addr, job string) (*api.Client, []*api.AllocationListStub, func(), error) {
	transport := cluster.NewTransport()
	client, err := api.NewClient(&api.Config{Address: addr, HttpClient: &http.Client{Transport: transport}})
	if err != nil {
		return nil, nil, nil, err
	}
	stubs, _, err := client.Jobs().Allocations(job, false, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		transport.CloseIdleConnections()
		return nil, nil, nil, err
	}
	var running []*api.AllocationListStub
	for _, s := range stubs {
		if s.ClientStatus == api.AllocClientStatusRunning && s.DesiredStatus == api.AllocDesiredStatusRun {
			running = append(running, s)
		}
	}
	return client, running, transport.CloseIdleConnections, nil
}

func minimalOne(ctx context.Context, client *api.Client, id string, resched bool) error {
	q := (&api.QueryOptions{}).WithContext(ctx)
	a, _, err := client.Allocations().Info(id, q)
	if err != nil {
		return err
	}
	if resched {
		if _, err := client.Allocations().Stop(a, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
			return err
		}
		// Follow the chain to a running replacement.
		cur, index := id, a.ModifyIndex
		for {
			w := &api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}
			x, qm, err := client.Allocations().Info(cur, w.WithContext(ctx))
			if err != nil {
				return err
			}
			index = qm.LastIndex
			switch {
			case x.NextAllocation != "":
				cur, index = x.NextAllocation, 0
			case cur != id && x.ClientStatus == api.AllocClientStatusRunning:
				return nil
			}
		}
	}
	before := a.TaskStates["main"].Restarts
	if err := client.Allocations().Restart(a, "", (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return err
	}
	index := a.ModifyIndex
	for {
		w := &api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}
		x, qm, err := client.Allocations().Info(id, w.WithContext(ctx))
		if err != nil {
			return err
		}
		index = qm.LastIndex
		if ts := x.TaskStates["main"]; ts != nil && ts.Restarts > before && ts.State == "running" {
			return nil
		}
	}
}
