package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// depsDriver is a driver whose gates read the job through read, and whose Consul is an
// address nobody dials (building the source does not connect).
func depsDriver(read func(ctx context.Context, call int) (*api.Job, error)) (*driver, *atomic.Int32) {
	var calls atomic.Int32
	e := New(Config{Holder: "deps:1", Health: HealthConfig{
		JobSpec: func(ctx context.Context, _, _ string) (*cluster.JobSpec, error) {
			job, err := read(ctx, int(calls.Add(1)))
			if err != nil {
				return nil, err
			}
			return cluster.NewJobSpec(job), nil
		},
		Consul: health.ConsulConfig{Address: "127.0.0.1:1"},
	}})
	return &driver{e: e, id: "r", jobNS: "default", jobID: "web", log: e.log,
		spec: normalizeSpec(restart.Spec{Health: restart.HealthChecks})}, &calls
}

var webJob = &api.Job{ID: ptr("web"), Name: ptr("web")}

// TestGateDepsErrorsNotKept: a read that failed because its caller's context ended, or
// transiently, is read again by the next gate; a permanent failure and a success are kept.
func TestGateDepsErrorsNotKept(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelExpired()
	<-expired.Done()
	live := context.Background()
	notFound := fmt.Errorf("job web: %w", cluster.ErrJobNotFound)

	cases := []struct {
		name string
		// first is the context of the first gate; read answers the calls in order.
		first     context.Context
		read      func(ctx context.Context, call int) (*api.Job, error)
		secondErr error // nil: the second gate gets the job
		calls     int32 // reads after both gates
	}{
		{name: "canceled", first: canceled, calls: 2,
			read: func(ctx context.Context, _ int) (*api.Job, error) {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return webJob, nil
			}},
		{name: "deadline passed", first: expired, calls: 2,
			read: func(ctx context.Context, _ int) (*api.Job, error) {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("Get \"/v1/job/web\": %w", ctx.Err())
				}
				return webJob, nil
			}},
		{name: "transient", first: live, calls: 2,
			read: func(_ context.Context, call int) (*api.Job, error) {
				if call == 1 {
					return nil, errors.New("Unexpected response code: 500 (No cluster leader)")
				}
				return webJob, nil
			}},
		{name: "permanent kept", first: live, calls: 1, secondErr: cluster.ErrJobNotFound,
			read: func(_ context.Context, call int) (*api.Job, error) {
				if call == 1 {
					return nil, notFound
				}
				return webJob, nil
			}},
		{name: "success kept", first: live, calls: 1,
			read: func(context.Context, int) (*api.Job, error) { return webJob, nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, calls := depsDriver(tc.read)
			job1, _, err1 := d.gateDeps(tc.first)
			job2, src2, err2 := d.gateDeps(live)
			switch {
			case tc.secondErr != nil:
				if !errors.Is(err1, tc.secondErr) || !errors.Is(err2, tc.secondErr) {
					t.Errorf("gates: %v, then %v; want %v both times", err1, err2, tc.secondErr)
				}
			case err2 != nil || job2.Name() != *webJob.Name || src2.Consul == nil:
				t.Errorf("second gate: job %v consul %v err %v; want the job and a Consul source (the first gate's error %v must not be kept)", job2, src2.Consul, err2, err1)
			case tc.first == live && (err1 == nil) != (job1 != nil && job1.Name() == *webJob.Name):
				t.Errorf("first gate: job %v err %v", job1, err1)
			}
			if got := calls.Load(); got != tc.calls {
				t.Errorf("%d reads of the job, want %d", got, tc.calls)
			}
		})
	}
}

// TestGateDepsSharedRead: gates that start while a read is in flight share it; one whose
// context ends meanwhile returns at once with its own context's error, and that does not
// spoil the read for the others.
func TestGateDepsSharedRead(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	d, calls := depsDriver(func(ctx context.Context, _ int) (*api.Job, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
			return webJob, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const waiters = 4
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _, err := d.gateDeps(ctx)
		errs <- err
	}()
	<-started
	for range waiters - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := d.gateDeps(ctx)
			errs <- err
		}()
	}
	// A gate canceled while it waits for the shared read.
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := d.gateDeps(gone); !errors.Is(err, context.Canceled) {
		t.Errorf("gate canceled while waiting: %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("gate sharing the read: %v", err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("%d reads of the job, want 1 shared", got)
	}
}
