package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// prefixListLimit is the page size of the prefix search, as in Nomad's Meta.JobIDByPrefix
// ("reduce load for large sets").
const prefixListLimit = 20

// ResolveJob finds a job by ID or unique prefix as Nomad's Meta.JobByPrefix does: a prefix
// list (one page of 20) in namespace ("*" for all); one match, or an exact match first in
// the list (unless the same ID exists in several namespaces), wins; without the list-jobs
// permission the prefix is used as the literal ID. Then the job is read in its namespace.
func (n *Nomad) ResolveJob(ctx context.Context, namespace, prefix string) (*restart.Job, error) {
	jobID, jobNS, err := n.resolveJobID(ctx, namespace, prefix)
	if err != nil {
		return nil, err
	}
	return n.Job(ctx, jobNS, jobID)
}

// readJob reads a job's specification by its exact ID in its namespace, its error saying
// which job (ErrJobNotFound when there is none).
func (n *Nomad) readJob(ctx context.Context, namespace, jobID string) (*api.Job, error) {
	job, err := read(ctx, n, "reading job", func(ctx context.Context) (*api.Job, error) {
		j, _, err := n.client.Jobs().Info(jobID, queryOpts(ctx, namespace))
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading job %q in namespace %q: %w", jobID, nsName(namespace), classify(err, ErrJobNotFound))
	}
	return job, nil
}

// Job reads a job by its exact ID in its namespace: one request, where ResolveJob lists by
// prefix first. ErrJobNotFound when there is none.
func (n *Nomad) Job(ctx context.Context, jobNS, jobID string) (*restart.Job, error) {
	job, err := n.readJob(ctx, jobNS, jobID)
	if err != nil {
		return nil, err
	}
	out := convertJob(job)
	if out.Namespace == "" {
		out.Namespace = jobNS
	}
	n.learnRegion(out.Region)
	return out, nil
}

// resolveJobID returns the job's ID and namespace.
func (n *Nomad) resolveJobID(ctx context.Context, namespace, prefix string) (string, string, error) {
	stubs, err := read(ctx, n, "listing jobs", func(ctx context.Context) ([]*api.JobListStub, error) {
		q := queryOpts(ctx, namespace)
		q.Prefix = prefix
		q.PerPage = prefixListLimit
		s, _, err := n.client.Jobs().List(q)
		return s, err
	})
	if err != nil {
		if errors.Is(classify(err, nil), ErrPermissionDenied) {
			// Nomad's command falls back to the literal ID when the token may not list
			// jobs; the read then fails with "job not found" for a mere prefix.
			return prefix, literalNamespace(namespace), nil
		}
		return "", "", fmt.Errorf("listing jobs with prefix %q in namespace %q: %w", prefix, nsName(namespace), err)
	}
	if len(stubs) == 0 {
		return "", "", &kindError{kind: ErrJobNotFound, err: fmt.Errorf("no job with prefix or ID %q in namespace %q", prefix, nsName(namespace))}
	}
	// The api client sorts the list by ID; keep namespaces in a stable order too.
	sort.SliceStable(stubs, func(i, j int) bool {
		if stubs[i].ID != stubs[j].ID {
			return stubs[i].ID < stubs[j].ID
		}
		return stubs[i].Namespace < stubs[j].Namespace
	})
	if len(stubs) > 1 {
		exact := stubs[0].ID == prefix
		// The same ID twice can only come from several namespaces (a "*" search, given
		// here or in the client's configuration).
		inSeveralNamespaces := stubs[0].ID == stubs[1].ID
		if !exact || inSeveralNamespaces {
			amb := &AmbiguousJobError{Prefix: prefix}
			for _, s := range stubs {
				amb.Matches = append(amb.Matches, stubNamespace(s)+"/"+s.ID)
			}
			return "", "", amb
		}
	}
	return stubs[0].ID, stubNamespace(stubs[0]), nil
}

func stubNamespace(s *api.JobListStub) string {
	if s.Namespace != "" {
		return s.Namespace
	}
	if s.JobSummary != nil {
		return s.JobSummary.Namespace
	}
	return ""
}

// literalNamespace is the namespace a literal job ID is read in when the prefix list was
// denied: "*" names no namespace a job can live in, so the default one is used (Nomad's
// command reads it in the client's namespace, where "*" would find nothing).
func literalNamespace(namespace string) string {
	if namespace == api.AllNamespacesNamespace {
		return "default"
	}
	return namespace
}

// nsName names a namespace in messages.
func nsName(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// JobVersions returns the job's versions by version number (without diffs). Versions that
// Nomad garbage-collected are absent.
func (n *Nomad) JobVersions(ctx context.Context, namespace, jobID string) (map[uint64]*restart.Job, error) {
	versions, err := read(ctx, n, "reading job versions", func(ctx context.Context) ([]*api.Job, error) {
		v, _, _, err := n.client.Jobs().Versions(jobID, false, queryOpts(ctx, namespace))
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading versions of job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	out := make(map[uint64]*restart.Job, len(versions))
	for _, v := range versions {
		if j := convertJob(v); j != nil {
			out[j.Version] = j
		}
	}
	return out, nil
}

// JobAllocations lists every allocation of the job (all=true, so that allocations of older
// job versions are included), newest CreateIndex first as Nomad's command orders them, with
// the task states the list stubs carry, in Nomad's order. The list is decoded as it arrives, one stub at a
// time, and kept only as converted: a 10,000-allocation job's list is about 35 MB of JSON,
// and decoding it whole would hold several times that at once. The streamed answer carries
// no index, so the index returned is 0.
func (n *Nomad) JobAllocations(ctx context.Context, namespace, jobID string) ([]*restart.Alloc, uint64, error) {
	allocs, err := read(ctx, n, "listing job allocations", func(ctx context.Context) ([]*restart.Alloc, error) {
		body, err := n.client.Raw().Response("/v1/job/"+url.PathEscape(jobID)+"/allocations?all=true", queryOpts(ctx, namespace))
		if err != nil {
			return nil, err
		}
		defer body.Close()
		return decodeStubs(body)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("listing allocations of job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	return allocs, 0, nil
}

// decodeStubs reads a JSON array of allocation list stubs one element at a time.
func decodeStubs(r io.Reader) ([]*restart.Alloc, error) {
	var out []*restart.Alloc
	err := eachStub(r, func(stub *api.AllocationListStub) bool {
		out = append(out, convertStub(stub))
		return true
	})
	return out, err
}

// eachStub decodes a JSON array of allocation list stubs one element at a time and hands
// each to fn, until fn returns false; only one stub is held at a time.
func eachStub(r io.Reader, fn func(*api.AllocationListStub) bool) error {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil {
		return fmt.Errorf("decoding the allocation list: %w", err)
	} else if d, ok := tok.(json.Delim); !ok || d != '[' {
		if tok == nil {
			return nil // null: no allocations
		}
		return fmt.Errorf("decoding the allocation list: got %v, want an array", tok)
	}
	for dec.More() {
		var stub api.AllocationListStub
		if err := dec.Decode(&stub); err != nil {
			return fmt.Errorf("decoding the allocation list: %w", err)
		}
		if !fn(&stub) {
			return nil
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("decoding the allocation list: %w", err)
	}
	return nil
}

func (n *Nomad) jobAllocations(ctx context.Context, namespace, jobID string, waitIndex uint64) ([]*api.AllocationListStub, uint64, error) {
	stubs, index, err := watchRead(ctx, n, "listing job allocations", namespace, waitIndex, func(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
		return n.client.Jobs().Allocations(jobID, true, q)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("listing allocations of job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	return stubs, index, nil
}

// ActiveDeployment returns the job's deployment that is not terminal (neither successful,
// failed nor cancelled, as Nomad's command checks), or nil.
func (n *Nomad) ActiveDeployment(ctx context.Context, namespace, jobID string) (*Deployment, error) {
	deps, err := read(ctx, n, "listing deployments", func(ctx context.Context) ([]*api.Deployment, error) {
		d, _, err := n.client.Jobs().Deployments(jobID, true, queryOpts(ctx, namespace))
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing deployments of job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	for _, d := range deps {
		if d == nil {
			continue
		}
		if dep := (&Deployment{ID: d.ID, Status: d.Status, ModifyIndex: d.ModifyIndex}); dep.Active() {
			return dep, nil
		}
	}
	return nil, nil
}

// ForceEvaluate creates an evaluation of the job with ForceReschedule, which the system
// scheduler needs to replace a stopped allocation (Nomad issue 19043). It is not retried
// unless the request provably never reached Nomad.
func (n *Nomad) ForceEvaluate(ctx context.Context, namespace, jobID string) error {
	_, err := write(ctx, n, "evaluating job", func(ctx context.Context) (string, error) {
		id, _, err := n.client.Jobs().EvaluateWithOpts(jobID, api.EvalOptions{ForceReschedule: true},
			(&api.WriteOptions{Namespace: namespace}).WithContext(ctx))
		return id, err
	})
	if err != nil {
		return fmt.Errorf("evaluating job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	return nil
}
