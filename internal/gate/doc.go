// Package gate holds a rolling restart between batches until what Prometheus measures says
// the restarted service is well.
//
// Why: Nomad's health (a task running, its checks passing) says that the processes are up,
// not that the service works. A build that answers its health check but fails one request
// in three passes every Nomad check; the error rate shows it. A gate is a PromQL query and
// a comparison, e.g.
//
//	errors: sum(rate(http_requests_total{job="{{job}}",code=~"5.."}[30s])) / sum(rate(http_requests_total{job="{{job}}"}[30s])) < 0.02
//
// given as -gate flags (Parse, ParseAll) or in job meta, nomad-restart.gate.errors =
// "<query> < 0.02" (ParseMeta). The query may name the batch: {{job}}, {{namespace}},
// {{group}}, {{batch}}, and {{allocs}} and {{alloc_names}}, regexps matching exactly the
// batch's allocation IDs and names, for per-instance labels (Spec.Query).
//
// After a batch is healthy, Run measures every gate as Argo Rollouts' analysis does (the
// Policy): wait Delay, then take Count measurements Interval apart. A measurement fails
// when its comparison is false; no data (no series, or NaN as from 0/0 with no traffic)
// fails too unless NoData is Pass. More than FailureLimit failed measurements fail the
// gate at once. A query that gets no number (Prometheus down, a query it rejects, several
// series) is no measurement: it is retried at the next interval, and more than ErrorLimit
// of them in a row fail the gate. Both limits are, as in Argo, what is tolerated: 0 means
// the first failure fails the gate. The gate passes after Count measurements; the batch
// goes on when every gate passed, and stops at the first that failed, with a one-line
// reason naming the values (Tally). A dry run measures and reports but never stops a
// restart.
//
// The judgement is pure (Spec.Judge, Spec.Tally: measurements in, outcome out); Run is the
// loop around it, on a Querier (Prometheus's HTTP API, package gate/prometheus, or a fake)
// and a Clock. Run hands
// each measurement to its caller to record before it goes on, and takes the recorded ones
// back after a crash, so a resumed restart continues its count instead of starting over.
//
// The package does no I/O of its own and imports nothing of the project: the restart's
// record keeps its types, the engine runs it.
package gate
