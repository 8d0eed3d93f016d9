package agent

import (
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// driveObserver turns one drive's events into metrics. The engine calls sink from one
// goroutine at a time per drive, so it needs no lock.
type driveObserver struct {
	m        *Metrics
	acquired bool
	// The batch in flight: from its start to its last allocation's end (operator
	// questions and batch waits after it are not the batch's duration).
	batchOpen    bool
	batchStart   time.Time
	lastAllocEnd time.Time
	gateStart    map[string]time.Time
}

func (o *driveObserver) closeBatch() {
	if o.batchOpen && !o.lastAllocEnd.IsZero() && !o.lastAllocEnd.Before(o.batchStart) {
		o.m.observeBatch(o.lastAllocEnd.Sub(o.batchStart))
	}
	o.batchOpen = false
}

func (o *driveObserver) sink(ev restart.Event) {
	if o.gateStart == nil {
		o.gateStart = map[string]time.Time{}
	}
	switch ev.Type {
	case restart.EventStarted, restart.EventDriver:
		// The first driver starts the restart; a later one records that it took over.
		tookOver := ev.Type == restart.EventStarted || strings.Contains(ev.Message, "took over")
		if tookOver && !o.acquired {
			o.acquired = true
			o.m.lease("acquired")
			o.m.adoptions.Inc()
		}
	case restart.EventBatchStarted:
		o.closeBatch()
		o.batchOpen, o.batchStart, o.lastAllocEnd = true, ev.Time, time.Time{}
	case restart.EventBatchFinished, restart.EventQuestion, restart.EventSucceeded, restart.EventFailed, restart.EventCanceled:
		o.closeBatch()
	case restart.EventAllocWaiting:
		o.gateStart[ev.AllocID] = ev.Time
	case restart.EventAllocDone, restart.EventAllocFailed:
		result := "restarted"
		if ev.Type == restart.EventAllocFailed {
			result = "failed"
		}
		o.m.allocs.WithLabelValues(result).Inc()
		o.lastAllocEnd = ev.Time
		if t, ok := o.gateStart[ev.AllocID]; ok && !ev.Time.Before(t) {
			o.m.observeGate(ev.Time.Sub(t))
			delete(o.gateStart, ev.AllocID)
		}
	case restart.EventGatePassed:
		o.m.metricGates.WithLabelValues("passed").Inc()
	case restart.EventGateFailed:
		o.m.metricGates.WithLabelValues("failed").Inc()
	case restart.EventGateWouldFail:
		o.m.metricGates.WithLabelValues("would-fail").Inc()
	case restart.EventAllocSkipped:
		o.m.allocs.WithLabelValues("skipped").Inc()
		o.lastAllocEnd = ev.Time
	}
}
