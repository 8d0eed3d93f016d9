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
	// GroupHealth holds each targeted group's min-healthy time and healthy deadline as
	// resolved at planning: the flags where given, else the group's update block, else
	// Nomad's defaults (for HealthRunning only the deadline comes from the update block).
	// A group missing here uses the fields above.
	GroupHealth map[string]GroupHealth `json:",omitempty"`
	// ConsulAddress is where Consul's health API was reached at planning (no token is
	// recorded), so that a driver resuming the restart elsewhere reads the same Consul;
	// empty: the driver's own configuration (CONSUL_HTTP_ADDR).
	ConsulAddress string `json:",omitempty"`
	// MaxUnavailable is -max-unavailable: how many allocations of a group may be out of
	// service at once, counting those unhealthy for any reason and those being
	// restarted; nil: the size of the batch.
	MaxUnavailable *BatchSize `json:",omitempty"`
	// Filter is -filter: Nomad's filter expression on allocations; only those it matches
	// are restarted.
	Filter string `json:",omitempty"`
	// Nodes (-node: node ID prefixes or names) and Datacenters (-datacenter) restrict the
	// restart to allocations placed there.
	Nodes       []string `json:",omitempty"`
	Datacenters []string `json:",omitempty"`
	// UnhealthyFirst is -unhealthy-first: allocations out of service come first in the
	// plan, so that the restart starts with what is already broken.
	UnhealthyFirst bool `json:",omitempty"`
	// Surge is -surge: each targeted group of a service job is scaled up by this many
	// allocations before the first batch (and waited for until healthy), and back down
	// before the restart ends, so that a one- or two-instance service stays up.
	Surge int `json:",omitempty"`
	// SurgeIgnoreScaling is -surge-ignore-scaling: surge even a group whose count a
	// scaling policy (the autoscaler) manages.
	SurgeIgnoreScaling bool `json:",omitempty"`
	// StartedBefore keeps only the allocations whose targeted tasks started (or last
	// restarted) before it: a config-change rollout leaves alone an allocation that
	// started after the change, which already runs with the new data. Zero: no such rule.
	StartedBefore time.Time `json:",omitzero"`
	// CreatedBeforeIndex keeps only the allocations created before this Raft index (the
	// changed Nomad variable's ModifyIndex): one placed after the change rendered the new
	// data at its start. Zero: no such rule.
	CreatedBeforeIndex uint64 `json:",omitempty"`
	// OnlyAllocs keeps only the allocations with these IDs: those found running with a
	// template re-rendered after their tasks started (run -stale-only, a rollout on
	// re-renders). Nil: no such rule.
	OnlyAllocs []string `json:",omitempty"`
	// Gates are the metric gates judged after each batch (-gate and its options); nil:
	// none.
	Gates *Gates `json:",omitempty"`
	// Drain is -drain as planning resolved it: how long, before each allocation's restart
	// or stop request, its instances of the Consul services that Nomad would stop with no
	// delay after leaving the catalog are kept out of Consul's passing answers, so that a
	// load balancer reading them stops sending before the instance stops. 0: no drain.
	Drain time.Duration `json:",omitempty"`
	// DrainGiven says that the operator set -drain (0 included); otherwise planning drains
	// for DefaultDrain where the health gate reads Consul (auto). Kept in JSON, unlike the
	// other planning inputs, so that a schedule's occurrences and a fleet's children plan
	// with the operator's choice.
	DrainGiven bool `json:",omitempty"`
	// DrainUntil lists where the drain sees that the load balancers stopped sending to an
	// instance (-drain-until): the drain ends as soon as every one of them dropped it, and
	// at the latest after Drain. Kept, as DrainGiven, for every planning and every driver.
	DrainUntil []DrainEvidence `json:",omitempty"`
	// BalancerRefresh is how often the balancers the services' tags name read Consul,
	// where the operator says it differs from their defaults (-balancer-refresh), by key.
	BalancerRefresh map[string]time.Duration `json:",omitempty"`
	// DrainBalancer is what planning found the drain's length by: the balancer the
	// services' tags name and its refresh ("Traefik (...)"), for the plan and the record;
	// empty when the tags name none.
	DrainBalancer string `json:",omitempty"`
	// MinHealthyTimeGiven and HealthyDeadlineGiven say that the operator set the times
	// (flags); otherwise planning takes each group's update block. Planning inputs only:
	// the resolved times are in GroupHealth.
	MinHealthyTimeGiven  bool `json:"-"`
	HealthyDeadlineGiven bool `json:"-"`
}

// GroupHealth is one group's readiness timing.
type GroupHealth struct {
	MinHealthyTime  time.Duration
	HealthyDeadline time.Duration
}

// HealthTimes returns the min-healthy time and healthy deadline that apply to group.
func (s Spec) HealthTimes(group string) (minHealthy, deadline time.Duration) {
	if g, ok := s.GroupHealth[group]; ok {
		return g.MinHealthyTime, g.HealthyDeadline
	}
	return s.MinHealthyTime, s.HealthyDeadline
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
	// HealthChecks: HealthRunning, plus every check that counts (Nomad-native checks of
	// mode healthiness, Consul checks of the allocation's services) passing, all
	// continuously for the min-healthy time.
	HealthChecks HealthMode = "checks"
	// HealthAuto is what an operator may ask for: HealthChecks where the targeted groups
	// define checks, else HealthRunning. Planning resolves it; records hold the result.
	HealthAuto HealthMode = "auto"
)

// DefaultDrain is -drain auto's drain where the services' tags name no balancer: two
// refreshes of a load balancer that follows Consul within a second (Fabio's blocking
// queries, consul-template's), as for a shutdown_delay. A balancer known by its tags
// drains for its own refresh (TaggedBalancer.Drain).
const DefaultDrain = 2 * time.Second

// MaxDrain bounds -drain: a drain holds the batch, and anything longer than a balancer's
// slowest refresh is waste.
const MaxDrain = 5 * time.Minute

// DefaultHealthyDeadline is Nomad's default update.healthy_deadline.
const DefaultHealthyDeadline = 5 * time.Minute
