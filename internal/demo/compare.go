package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Printer is where the comparison says what it does, in the command's human output.
type Printer interface {
	// Header starts a step: a timestamped line.
	Header(msg string)
	// Plain prints text as is.
	Plain(text string)
	// Options says, under the header, the options a restart runs with.
	Options(spec restart.Spec)
}

// Comparison is what Compare does with the sample job: nomad-restart's options, the
// command line's restart, and where to say what it does.
type Comparison struct {
	// Spec is nomad-restart's restart; Nomad's way keeps its batches and tasks.
	Spec restart.Spec
	// Restart restarts the sample job with spec as nomad-restart does, printing nothing,
	// and returns its final record; a restart that did not succeed is an error.
	Restart func(ctx context.Context, spec restart.Spec) (*restart.Record, error)
	// Out is where each step and each change of the instances serving is said; nil says
	// nothing (-json).
	Out Printer
}

// measuredCluster is what the comparison needs of the demo's simulated cluster.
type measuredCluster struct {
	probe servingProbe
	// clock and scale are the simulation's: its clock runs scale times faster than this one.
	clock func() time.Time
	scale float64
	// count is how many instances serve when all do.
	count int
	// balancer makes a load balancer in front of the service, a new one for each restart.
	balancer func() loadBalancer
}

// Result is the comparison: the same service restarted twice.
type Result struct {
	Count int `json:"count"`
	// Nomad is the restart as `nomad job restart` does it; NomadRestart as nomad-restart does.
	Nomad        Figures `json:"nomad"`
	NomadRestart Figures `json:"nomad_restart"`
}

// sampleEvery is how often the instances are probed: every 100 ms of the simulation's
// clock, and no more than 50 times a real second (each probe reads every allocation).
func sampleEvery(scale float64) time.Duration {
	return max(time.Duration(float64(100*time.Millisecond)/scale), 20*time.Millisecond)
}

// compareRestarts waits until every instance serves, then restarts the demo job as Nomad's
// command does and, once all serve again, as nomad-restart does with cmp's options, probing
// every instance throughout.
func compareRestarts(ctx context.Context, dc measuredCluster, cmp Comparison) (*Result, error) {
	meter := servingMeter{probe: dc.probe, clock: dc.clock, every: sampleEvery(dc.scale), count: dc.count, recoverWithin: 2 * time.Minute}
	if err := meter.waitAllServing(ctx); err != nil {
		return nil, fmt.Errorf("waiting for the sample job's instances to serve: %w", err)
	}
	nm, err := measurePhase(ctx, meter, dc, cmp, asNomadDoes(cmp.Spec),
		fmt.Sprintf("1. Restarting job %q as `nomad job restart` does: a batch is done once its old processes exited", JobID))
	if err != nil {
		return nil, fmt.Errorf("restarting as `nomad job restart` does: %w", err)
	}
	gm, err := measurePhase(ctx, meter, dc, cmp, cmp.Spec,
		fmt.Sprintf("2. Restarting job %q as nomad-restart does: a batch is done once its instances pass their health checks again", JobID))
	if err != nil {
		return nil, fmt.Errorf("restarting as nomad-restart does: %w", err)
	}
	return &Result{Count: dc.count, Nomad: nm.figures(), NomadRestart: gm.figures()}, nil
}

// asNomadDoes is spec as Nomad's command runs it: done when the restart requests return
// (-health none), and no availability budget (Nomad's command has none), nor surge.
func asNomadDoes(spec restart.Spec) restart.Spec {
	spec.Health = restart.HealthNone
	all := restart.BatchSize{N: 100, Percent: true}
	spec.MaxUnavailable = &all
	spec.Surge, spec.SurgeIgnoreScaling, spec.UnhealthyFirst = 0, false, false
	// Nomad's command drains nothing.
	spec.Drain, spec.DrainGiven, spec.DrainUntil = 0, true, nil
	return spec
}

// measurePhase runs one restart with spec under the meter and a load balancer's traffic,
// saying (to cmp.Out) what it does and each change of the number of instances serving.
func measurePhase(ctx context.Context, meter servingMeter, dc measuredCluster, cmp Comparison, spec restart.Spec, title string) (*measured, error) {
	if p := cmp.Out; p != nil {
		p.Plain("")
		p.Header(title)
		p.Options(spec)
		meter.onSample = servingChanges(p, meter.count)
	}
	lb := dc.balancer()
	if err := startCounting(ctx, lb, meter.count); err != nil {
		return nil, err
	}
	m, err := meter.measure(ctx, func(ctx context.Context) (*restart.Record, error) {
		return cmp.Restart(ctx, spec)
	})
	if err != nil {
		lb.stop()
		return nil, err
	}
	if m.requests, err = stopCounting(ctx, lb, meter.count); err != nil {
		return nil, err
	}
	if p := cmp.Out; p != nil {
		printDrains(p, m.rec)
	}
	return m, nil
}

// servingChanges prints a line for the first sample and for each change of the number of
// instances serving, timed from the first on the cluster's clock.
func servingChanges(p Printer, count int) func(servingSample) {
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
		p.Plain(fmt.Sprintf("    %6.1fs  %d of %d instances serving", s.at.Sub(start).Seconds(), s.serving, count))
	}
}

// printDrains says how each drain of the restart went, from its record: how long it was
// planned for, and what ended it.
func printDrains(p Printer, rec *restart.Record) {
	if rec == nil || rec.Spec.Drain <= 0 {
		return
	}
	p.Plain("")
	p.Plain("Each allocation was first drained: " + rec.Spec.DrainText() + ".")
	for _, ev := range rec.Events {
		if ev.Type == restart.EventWarning || (ev.Type == restart.EventAllocDrain && strings.HasPrefix(ev.Message, "Drained: ")) {
			p.Plain("  " + ev.Message)
		}
	}
}
