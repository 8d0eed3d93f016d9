package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Nomad's servers refuse a job whose groups' counts add up to more than the server option
// job_max_count (nomad/job_endpoint.go, Scale; nomad/job_endpoint_hooks.go, the register
// validator): a plain RPC error, which the HTTP agent answers with a 500 and its text.

// jobMaxCountText is how Nomad's refusal starts; the total asked for and the limit follow,
// as "%d > %d".
const jobMaxCountText = "total count was greater than configured job_max_count: "

// defaultJobMaxCount is the limit a server applies when its configuration does not set
// job_max_count (structs.JobDefaultMaxCount, applied in command/agent/agent.go).
const defaultJobMaxCount = 50000

// JobMaxCountError is Nomad's refusal of a job that would have more allocations in all than
// its servers allow (job_max_count). Its text is Nomad's.
type JobMaxCountError struct {
	// Total is the job's count, summed over its groups, that was asked for; Max the limit.
	Total, Max int
	// Nomad is Nomad's words ("total count was greater than configured job_max_count:
	// 100000002 > 50000"), without the api client's framing.
	Nomad string
	err   error
}

func (e *JobMaxCountError) Error() string { return e.err.Error() }
func (e *JobMaxCountError) Unwrap() error { return e.err }

// asJobMaxCount returns Nomad's job_max_count refusal in err as a *JobMaxCountError, or nil
// when err is not one.
func asJobMaxCount(err error) *JobMaxCountError {
	if err == nil {
		return nil
	}
	msg := responseBody(err)
	if msg == "" {
		msg = err.Error()
	}
	i := strings.Index(msg, jobMaxCountText)
	if i < 0 {
		return nil
	}
	var total, limit int
	if _, serr := fmt.Sscanf(msg[i+len(jobMaxCountText):], "%d > %d", &total, &limit); serr != nil {
		return nil
	}
	words := fmt.Sprintf("%s%d > %d", jobMaxCountText, total, limit)
	return &JobMaxCountError{Total: total, Max: limit, Nomad: words, err: err}
}

// jobMaxCount is the most allocations Nomad lets a job have in all (its servers'
// job_max_count), 0 when it is not known or there is no limit. It is read once from the
// configuration of the agent the client talks to, when the token may read it (agent:read)
// and the agent is a server (a client agent's configuration says nothing of the servers'),
// or learnt from a refusal (learnJobMaxCount). A read that failed in a way that passes is
// tried again on the next call; it is not retried here, as nothing waits on it: Nomad's
// refusal at scale time says the same.
func (n *Nomad) jobMaxCount(ctx context.Context) int {
	n.mu.Lock()
	known, v := n.maxCountKnown, n.maxCount
	n.mu.Unlock()
	if known {
		return v
	}
	var self api.AgentSelf
	if _, err := n.client.Raw().Query("/v1/agent/self", &self, queryOpts(ctx, "")); err != nil {
		n.log.Debug("cannot read the servers' job_max_count from the agent's configuration", "err", err)
		if IsTransient(err) || ctx.Err() != nil {
			return 0
		}
		n.setJobMaxCount(0) // denied (no agent:read), or no such endpoint: learnt at scale time
		return 0
	}
	v = jobMaxCountOf(self.Config)
	n.setJobMaxCount(v)
	return v
}

// jobMaxCountOf reads job_max_count from an agent's configuration as /v1/agent/self gives
// it: Server.JobMaxCount, null when the configuration does not set it (the server then
// applies defaultJobMaxCount). 0 when the agent is not a server, or when the limit is 0
// (none).
func jobMaxCountOf(config map[string]any) int {
	server, _ := config["Server"].(map[string]any)
	if enabled, _ := server["Enabled"].(bool); !enabled {
		return 0
	}
	switch v := server["JobMaxCount"].(type) {
	case nil:
		return defaultJobMaxCount
	case float64:
		return max(int(v), 0)
	}
	return 0
}

// setJobMaxCount records the servers' job_max_count as known (0: unknown, and not to be
// asked again).
func (n *Nomad) setJobMaxCount(v int) {
	n.mu.Lock()
	n.maxCount, n.maxCountKnown = v, true
	n.mu.Unlock()
}

// learnJobMaxCount records the limit a refusal named: later plans check it before anything
// changes.
func (n *Nomad) learnJobMaxCount(e *JobMaxCountError) {
	if e != nil && e.Max > 0 {
		n.setJobMaxCount(e.Max)
	}
}
