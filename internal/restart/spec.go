package restart

import "time"

// Spec is what an operator asked a restart to do. Its fields mirror the flags of
// `nomad job restart`, plus the deadlines and health gate nomad-restart adds.
type Spec struct {
	// BatchSizes is -batch-size: one size, or progressive sizes where the last repeats.
	BatchSizes []BatchSize
	// BatchWait is -batch-wait as a duration; BatchWaitAsk is -batch-wait=ask.
	BatchWait    time.Duration
	BatchWaitAsk bool     `json:",omitempty"`
	Groups       []string `json:",omitempty"`
	Tasks        []string `json:",omitempty"`
	AllTasks     bool     `json:",omitempty"`
	Reschedule   bool     `json:",omitempty"`
	// NoShutdownDelay is -no-shutdown-delay. Nomad honours it only on stops (-reschedule);
	// the in-place restart endpoint has no such option, and we say so rather than pretend.
	NoShutdownDelay bool    `json:",omitempty"`
	OnError         OnError // ask or fail
	// Yes is -yes: questions are answered as Nomad's command answers them with -yes.
	Yes bool `json:",omitempty"`
	// Health is the readiness gate an allocation must pass before it counts as done.
	Health HealthMode
	// HealthyDeadline bounds the wait for one allocation to be running (and healthy) again
	// after the request; past it the allocation failed.
	HealthyDeadline time.Duration
	// MinHealthyTime is how long an allocation must stay healthy before it counts as done.
	MinHealthyTime time.Duration `json:",omitempty"`
}

// BatchSize is one -batch-size value: N allocations, or N percent of the eligible ones
// (rounded up, as Nomad does).
type BatchSize struct {
	N       int
	Percent bool `json:",omitempty"`
}

// OnError is -on-error.
type OnError string

const (
	OnErrorAsk  OnError = "ask"
	OnErrorFail OnError = "fail"
)

// HealthMode is the gate an allocation passes before its restart counts as done.
type HealthMode string

const (
	// HealthNone is Nomad's own behaviour: done when the restart request returned (in
	// place) or the replacement's client status is running (-reschedule).
	HealthNone HealthMode = "none"
	// HealthRunning: the allocation is running and every targeted task is running again
	// after our request (started after it, per Nomad's task events and counters).
	HealthRunning HealthMode = "running"
)

// DefaultHealthyDeadline is Nomad's default update.healthy_deadline.
const DefaultHealthyDeadline = 5 * time.Minute
