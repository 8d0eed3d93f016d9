package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// What Nomad's checks endpoint (/v1/client/allocation/:id/checks) answers for a check that
// counts for an allocation's health and passed its latest probe.
const (
	checkModeHealthiness = "healthiness"
	checkStatusSuccess   = "success"
)

// servingProbe counts the instances of a job that serve, as a load balancer following
// Nomad's service checks sees them: it asks the cluster, never the restart's plan or record.
type servingProbe struct {
	cluster   *cluster.Nomad
	namespace string
	jobID     string
	// consul, when set, is the Consul HTTP API whose checks of the service decide (a
	// Consul service's checks live there, not in Nomad's checks of the allocation).
	consul, service string
}

// serving counts the job's allocations that serve now: desired to run, running on their
// client, and passing every check of mode healthiness in a probe Nomad ran after the
// allocation's tasks last started. (Nomad keeps a check's last result across an in-place
// restart until the check runs again: a balancer that trusted it would send requests to a
// process still starting. Nomad stamps a result with the second its run began, so a result
// counts when its second is after the second of the latest start.)
func (p servingProbe) serving(ctx context.Context) (int, error) {
	allocs, _, err := p.cluster.JobAllocations(ctx, p.namespace, p.jobID)
	if err != nil {
		return 0, fmt.Errorf("listing the allocations of job %q: %w", p.jobID, err)
	}
	n := 0
	for _, a := range allocs {
		if a.DesiredStatus != restart.DesiredRun || a.ClientStatus != restart.ClientRunning {
			continue
		}
		started, running := runningSince(a)
		if !running {
			continue
		}
		if p.consul != "" {
			continue // counted below, from Consul
		}
		checks, err := p.cluster.AllocChecks(ctx, a.ID)
		if err != nil {
			return 0, fmt.Errorf("reading the checks of allocation %s: %w", a.ID[:min(8, len(a.ID))], err)
		}
		if healthy(checks, started) {
			n++
		}
	}
	if p.consul != "" {
		return p.consulServing(ctx, allocs)
	}
	return n, nil
}

// consulServing counts the running allocations whose instances' Consul checks all pass.
// Nomad registers a Consul service instance anew on every restart, its checks critical
// until they pass: a passing check is the new process's.
func (p servingProbe) consulServing(ctx context.Context, allocs []*restart.Alloc) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.consul+"/v1/health/checks/"+url.PathEscape(p.service), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading the checks of service %q from Consul: %w", p.service, err)
	}
	defer resp.Body.Close()
	var checks []struct{ ServiceID, Status string }
	if err := json.NewDecoder(resp.Body).Decode(&checks); err != nil {
		return 0, fmt.Errorf("reading the checks of service %q from Consul: %w", p.service, err)
	}
	n := 0
	for _, a := range allocs {
		if _, running := runningSince(a); !running || a.DesiredStatus != restart.DesiredRun || a.ClientStatus != restart.ClientRunning {
			continue
		}
		counted, passing := 0, true
		for _, c := range checks {
			if strings.Contains(c.ServiceID, a.ID) {
				counted++
				passing = passing && c.Status == "passing"
			}
		}
		if counted > 0 && passing {
			n++
		}
	}
	return n, nil
}

// healthy reports whether an allocation has checks that count for its health and all of
// them passed a probe run in a later second than the tasks' latest start (a check not
// probed yet is pending: not healthy).
func healthy(checks []cluster.CheckResult, started time.Time) bool {
	counted := 0
	for _, c := range checks {
		if c.Mode != checkModeHealthiness {
			continue
		}
		if c.Status != checkStatusSuccess || c.Time.Unix() <= started.Unix() {
			return false
		}
		counted++
	}
	return counted > 0
}

// runningSince reports whether every task of the allocation runs a process started after
// any restart or kill it was given (its latest lifecycle event is Started), and when the
// last of them started. A task told to restart still shows "running" until its process
// exits.
func runningSince(a *restart.Alloc) (time.Time, bool) {
	var latest time.Time
	for _, ts := range a.Tasks {
		if ts.State != restart.TaskRunning || lastLifecycleEvent(ts) != restart.TaskEventStarted {
			return time.Time{}, false
		}
		if ts.StartedAt.After(latest) {
			latest = ts.StartedAt
		}
	}
	return latest, len(a.Tasks) > 0
}

// lastLifecycleEvent is the type of the task's latest event that starts, restarts or stops
// its process ("" when it has none).
func lastLifecycleEvent(ts restart.TaskState) string {
	for i := len(ts.Events) - 1; i >= 0; i-- {
		switch t := ts.Events[i].Type; t {
		case restart.TaskEventStarted, restart.TaskEventRestartSignaled, restart.TaskEventRestarting,
			restart.TaskEventTerminated, restart.TaskEventKilling, restart.TaskEventKilled:
			return t
		}
	}
	return ""
}

// servingSample is how many instances served at an instant of the cluster's clock.
type servingSample struct {
	at      time.Time
	serving int
}

// servingMeter samples a probe while a restart runs.
type servingMeter struct {
	probe servingProbe
	// clock is the cluster's: figures are in its (simulated) seconds.
	clock func() time.Time
	// every is the real time between two samples.
	every time.Duration
	// count is how many instances serve when all do.
	count int
	// recoverWithin bounds, on the cluster's clock, how long after the restart ended the
	// instances may take to all serve again before the measure gives up.
	recoverWithin time.Duration
	// onSample, when set, sees every sample as it is taken.
	onSample func(servingSample)
}

func (m servingMeter) sample(ctx context.Context) (servingSample, error) {
	at := m.clock()
	n, err := m.probe.serving(ctx)
	if err != nil {
		return servingSample{}, err
	}
	s := servingSample{at: at, serving: n}
	if m.onSample != nil {
		m.onSample(s)
	}
	return s, nil
}

// waitAllServing samples until every instance serves.
func (m servingMeter) waitAllServing(ctx context.Context) error {
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for {
		s, err := m.sample(ctx)
		if err != nil {
			return err
		}
		if s.serving >= m.count {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// measured is what one restart did to the service: the samples from its start until it
// ended and every instance served again, when it ended, its record, and the requests a
// load balancer sent meanwhile (until every instance answered it again).
type measured struct {
	samples  []servingSample
	ended    time.Time
	rec      *restart.Record
	requests requestCounts
}

// figures sums up the measure as `demo -json` prints it.
func (m *measured) figures() Figures {
	f := figuresOf(m.samples, m.ended)
	f.Requests, f.FailedRequests = m.requests.requests, m.requests.failed
	f.RestartID = m.rec.ID
	return f
}

// measure runs the restart while sampling, and goes on sampling after it ended until every
// instance serves again: an outage that outlasts the restart counts.
func (m servingMeter) measure(ctx context.Context, run func(context.Context) (*restart.Record, error)) (*measured, error) {
	first, err := m.sample(ctx)
	if err != nil {
		return nil, err
	}
	type ending struct {
		rec *restart.Record
		err error
		at  time.Time
	}
	done := make(chan ending, 1)
	runCtx, cancel := context.WithCancel(ctx)
	go func() {
		rec, err := run(runCtx)
		done <- ending{rec, err, m.clock()}
	}()
	var end *ending
	defer func() {
		cancel()
		if end == nil {
			<-done // the restart stops at its next step; the session stays usable until then
		}
	}()

	out := &measured{samples: []servingSample{first}}
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-done:
			end = &e
			if e.err != nil {
				return nil, e.err
			}
		case <-tick.C:
		}
		s, err := m.sample(ctx)
		if err != nil {
			return nil, err
		}
		out.samples = append(out.samples, s)
		if end == nil {
			continue
		}
		if s.serving >= m.count {
			out.ended, out.rec = end.at, end.rec
			return out, nil
		}
		if s.at.Sub(end.at) > m.recoverWithin {
			return nil, fmt.Errorf("%d of %d instances serve %s after the restart ended; the service did not recover", s.serving, m.count, m.recoverWithin)
		}
	}
}
