package cluster

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// JobSpec reads the job's full specification. Its error is Nomad's answer, classified but
// not prefixed: callers say which job's checks they were reading.
func (n *Nomad) JobSpec(ctx context.Context, namespace, jobID string) (*onchange.JobSpec, error) {
	job, err := read(ctx, n, "reading job specification", func(ctx context.Context) (*api.Job, error) {
		j, _, err := n.client.Jobs().Info(jobID, queryOpts(ctx, namespace))
		return j, err
	})
	if err != nil {
		return nil, classify(err, ErrJobNotFound)
	}
	n.learnRegion(str(job.Region))
	return jobSpec(job, namespace), nil
}

// JobSummary reads the job's summary: its allocations counted by group and client status.
func (n *Nomad) JobSummary(ctx context.Context, namespace, jobID string) (*JobSummary, error) {
	sum, err := read(ctx, n, "reading job summary", func(ctx context.Context) (*api.JobSummary, error) {
		s, _, err := n.client.Jobs().Summary(jobID, queryOpts(ctx, namespace))
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the summary of job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	out := &JobSummary{Summary: make(map[string]GroupSummary, len(sum.Summary))}
	for g, s := range sum.Summary {
		out.Summary[g] = GroupSummary{Queued: s.Queued, Starting: s.Starting, Running: s.Running}
	}
	return out, nil
}

// MatchingAllocations asks Nomad which of the job's allocations filter matches. Nomad
// evaluates the expression on the allocations list (its job allocations endpoint takes no
// filter); the job's own clause keeps the answer small.
func (n *Nomad) MatchingAllocations(ctx context.Context, namespace, jobID, filter string) (map[string]bool, error) {
	expr := fmt.Sprintf("JobID == %q and Namespace == %q and (%s)", jobID, namespace, filter)
	stubs, err := read(ctx, n, "filtering allocations", func(ctx context.Context) ([]*api.AllocationListStub, error) {
		q := queryOpts(ctx, namespace)
		q.Filter = expr
		q.Params = map[string]string{"task_states": "false"}
		s, _, err := n.client.Allocations().List(q)
		return s, err
	})
	if err != nil {
		return nil, classify(err, nil)
	}
	out := make(map[string]bool, len(stubs))
	for _, s := range stubs {
		// The filter is the user's text inside the job's clause: one that closes the
		// parenthesis ("x) or (y") reaches past it, so the clause is checked here too.
		if s.JobID == jobID && s.Namespace == namespace {
			out[s.ID] = true
		}
	}
	return out, nil
}

// Nodes lists the cluster's nodes.
func (n *Nomad) Nodes(ctx context.Context) ([]Node, error) {
	nodes, err := read(ctx, n, "listing nodes", func(ctx context.Context) ([]*api.NodeListStub, error) {
		s, _, err := n.client.Nodes().List(queryOpts(ctx, ""))
		return s, err
	})
	if err != nil {
		return nil, classify(err, nil)
	}
	out := make([]Node, 0, len(nodes))
	for _, nd := range nodes {
		out = append(out, Node{ID: nd.ID, Name: nd.Name, Datacenter: nd.Datacenter})
	}
	return out, nil
}
