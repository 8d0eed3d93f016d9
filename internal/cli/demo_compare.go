package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// demoCluster is what the comparison needs of the demo's simulated cluster.
type demoCluster struct {
	ses   session
	probe servingProbe
	// clock and scale are the simulation's: its clock runs scale times faster than this one.
	clock func() time.Time
	scale float64
	// count is how many instances serve when all do.
	count int
	// balancer makes a load balancer in front of the service, a new one for each restart.
	balancer func() loadBalancer
}

// demoResult is the comparison: the same service restarted twice.
type demoResult struct {
	Count int `json:"count"`
	// Nomad is the restart as `nomad job restart` does it; NomadRestart as nomad-restart does.
	Nomad        servingFigures `json:"nomad"`
	NomadRestart servingFigures `json:"nomad_restart"`
}

// demoSampleEvery is how often the instances are probed: every 100 ms of the simulation's
// clock, and no more than 50 times a real second (each probe reads every allocation).
func demoSampleEvery(scale float64) time.Duration {
	return max(time.Duration(float64(100*time.Millisecond)/scale), 20*time.Millisecond)
}

// compareRestarts waits until every instance serves, then restarts the demo job as Nomad's
// command does and, once all serve again, as nomad-restart does with o's options, probing
// every instance throughout.
func (a *app) compareRestarts(ctx context.Context, p *printer, dc demoCluster, o *runOptions) (*demoResult, error) {
	meter := servingMeter{probe: dc.probe, clock: dc.clock, every: demoSampleEvery(dc.scale), count: dc.count, recoverWithin: 2 * time.Minute}
	if err := meter.waitAllServing(ctx); err != nil {
		return nil, fmt.Errorf("waiting for the sample job's instances to serve: %w", err)
	}
	nomadStyle := *o
	nomadStyle.spec = asNomadDoes(o.spec)
	nm, err := a.measurePhase(ctx, p, meter, dc, &nomadStyle,
		fmt.Sprintf("1. Restarting job %q as `nomad job restart` does: a batch is done once its old processes exited", o.job))
	if err != nil {
		return nil, fmt.Errorf("restarting as `nomad job restart` does: %w", err)
	}
	gm, err := a.measurePhase(ctx, p, meter, dc, o,
		fmt.Sprintf("2. Restarting job %q as nomad-restart does: a batch is done once its instances pass their health checks again", o.job))
	if err != nil {
		return nil, fmt.Errorf("restarting as nomad-restart does: %w", err)
	}
	return &demoResult{Count: dc.count, Nomad: nm.figures(), NomadRestart: gm.figures()}, nil
}

// asNomadDoes is spec as Nomad's command runs it: done when the restart requests return
// (-health none), and no availability budget (Nomad's command has none), nor surge.
func asNomadDoes(spec restart.Spec) restart.Spec {
	spec.Health = restart.HealthNone
	all := restart.BatchSize{N: 100, Percent: true}
	spec.MaxUnavailable = &all
	spec.Surge, spec.SurgeIgnoreScaling, spec.UnhealthyFirst = 0, false, false
	return spec
}

// measurePhase runs one restart under the meter and a load balancer's traffic, saying
// (unless -json) what it does and each change of the number of instances serving.
func (a *app) measurePhase(ctx context.Context, p *printer, meter servingMeter, dc demoCluster, o *runOptions, title string) (*measured, error) {
	if !p.json {
		p.plain("")
		p.header(a.now(), title)
		p.plain(strings.Repeat(" ", timestampPrefixLen) + "Options: " + describeSpec(o.spec))
		meter.onSample = servingChanges(p, meter.count)
	}
	lb := dc.balancer()
	if err := startCounting(ctx, lb, meter.count); err != nil {
		return nil, err
	}
	m, err := meter.measure(ctx, func(ctx context.Context) (*restart.Record, error) {
		return a.quietRestart(ctx, dc.ses, o)
	})
	if err != nil {
		lb.stop()
		return nil, err
	}
	if m.requests, err = stopCounting(ctx, lb, meter.count); err != nil {
		return nil, err
	}
	return m, nil
}

// servingChanges prints a line for the first sample and for each change of the number of
// instances serving, timed from the first on the cluster's clock.
func servingChanges(p *printer, count int) func(servingSample) {
	var start time.Time
	last := -1
	return func(s servingSample) {
		if start.IsZero() {
			start = s.at
		}
		if s.serving == last {
			return
		}
		last = s.serving
		p.plain(fmt.Sprintf("    %6.1fs  %d of %d instances serving", s.at.Sub(start).Seconds(), s.serving, count))
	}
}

// quietRestart plans, records and drives a restart with run's own steps, printing nothing
// on stdout: the demo shows what the instances did instead. Errors still reach stderr. It
// returns the restart's final record; a restart that did not succeed is an error.
func (a *app) quietRestart(ctx context.Context, ses session, o *runOptions) (*restart.Record, error) {
	quiet := &app{stdin: a.stdin, stdout: io.Discard, stderr: a.stderr, env: a.env, backend: a.backend, now: a.now}
	p := quiet.printer(false, false)
	plan, err := quiet.planRestart(ctx, p, ses, o)
	if err != nil {
		return nil, err
	}
	rec := plan.Record
	if len(rec.Allocs) == 0 {
		return nil, fmt.Errorf("no allocations of job %q to restart with these options", o.job)
	}
	eng, st, h, err := quiet.recordRestart(ctx, p, ses, rec, o)
	if err != nil {
		return nil, err
	}
	if err := quiet.drive(ctx, p, eng, st, rec, false, h.Drive); err != nil {
		return nil, err
	}
	final, err := st.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("reading restart %s back: %w", shortID(rec.ID, false), err)
	}
	return final, nil
}
