package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func histogram(t *testing.T, h interface{ Write(*dto.Metric) error }) (count uint64, sum float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
}

func TestDriveObserverMetrics(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := []struct {
		name              string
		events            []restart.Event
		acquired          float64
		batches           uint64
		batchSum          float64
		gates             uint64
		gateSum           float64
		restarted, failed float64
	}{
		{
			name: "first driver, two batches, a question after the first",
			events: []restart.Event{
				{Type: restart.EventStarted, Time: at(0)},
				{Type: restart.EventBatchStarted, Batch: 1, Time: at(0)},
				{Type: restart.EventAllocWaiting, AllocID: "a", Time: at(1)},
				{Type: restart.EventAllocDone, AllocID: "a", Time: at(4)},
				// The operator takes 100 s to answer: not the batch's duration.
				{Type: restart.EventQuestion, Batch: 1, Time: at(4)},
				{Type: restart.EventBatchFinished, Batch: 1, Time: at(104)},
				{Type: restart.EventBatchStarted, Batch: 2, Time: at(104)},
				{Type: restart.EventAllocWaiting, AllocID: "b", Time: at(105)},
				{Type: restart.EventAllocFailed, AllocID: "b", Time: at(110)},
				{Type: restart.EventFailed, Time: at(110)},
			},
			acquired: 1, batches: 2, batchSum: 4 + 6, gates: 2, gateSum: 3 + 5, restarted: 1, failed: 1,
		},
		{
			name: "a driver taking over mid-batch times no batch it did not see start",
			events: []restart.Event{
				{Type: restart.EventDriver, Message: "Driver x took over the restart", Time: at(0)},
				{Type: restart.EventAllocDone, AllocID: "c", Time: at(2)}, // its wait began under the old driver
				{Type: restart.EventBatchFinished, Batch: 3, Time: at(2)},
				{Type: restart.EventSucceeded, Time: at(2)},
			},
			acquired: 1, restarted: 1,
		},
		{
			name: "a detach event is no acquisition",
			events: []restart.Event{
				{Type: restart.EventDriver, Message: "Driver x detached; resume the restart with ...", Time: at(0)},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics()
			o := &driveObserver{m: m}
			for _, ev := range tc.events {
				o.sink(ev)
			}
			if got := testutil.ToFloat64(m.leases.WithLabelValues("acquired")); got != tc.acquired {
				t.Errorf("acquired = %v, want %v", got, tc.acquired)
			}
			if n, sum := histogram(t, m.batchSeconds); n != tc.batches || sum != tc.batchSum {
				t.Errorf("batches = %d (sum %v), want %d (sum %v)", n, sum, tc.batches, tc.batchSum)
			}
			if n, sum := histogram(t, m.gateSeconds); n != tc.gates || sum != tc.gateSum {
				t.Errorf("gate waits = %d (sum %v), want %d (sum %v)", n, sum, tc.gates, tc.gateSum)
			}
			if got := testutil.ToFloat64(m.allocs.WithLabelValues("restarted")); got != tc.restarted {
				t.Errorf("restarted = %v, want %v", got, tc.restarted)
			}
			if got := testutil.ToFloat64(m.allocs.WithLabelValues("failed")); got != tc.failed {
				t.Errorf("failed = %v, want %v", got, tc.failed)
			}
		})
	}
}

// The metric gates' outcomes are counted by outcome; a measurement counts nothing.
func TestDriveObserverCountsMetricGates(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	o := &driveObserver{m: m}
	for _, typ := range []restart.EventType{restart.EventGate, restart.EventGate, restart.EventGatePassed,
		restart.EventGate, restart.EventGateWouldFail, restart.EventGate, restart.EventGateFailed, restart.EventGatePassed} {
		o.sink(restart.Event{Type: typ})
	}
	for outcome, want := range map[string]float64{"passed": 2, "would-fail": 1, "failed": 1} {
		if got := testutil.ToFloat64(m.metricGates.WithLabelValues(outcome)); got != want {
			t.Errorf("metric_gates_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}
