// Package changereport is what the watches and stale commands read and print: the jobs
// opted in to config-change rollouts with each source's last change and the job's last
// rollout, what the agent would watch and do for one job (watches -explain), and the
// allocations that run a template Nomad re-rendered after their tasks started (stale, and
// run -stale-only's selection). It only reads: jobs, allocations and their files, the
// sources' listings and the restart records.
package changereport

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// ResolveJob finds the job by ID or unique prefix and reads its full specification.
func ResolveJob(ctx context.Context, nomad *cluster.Nomad, namespace, prefix string) (Job, error) {
	found, err := nomad.ResolveJob(ctx, namespace, prefix)
	if err != nil {
		return Job{}, jobLookupError(prefix, namespace, err)
	}
	spec, err := nomad.JobSpec(ctx, found.Namespace, found.ID)
	if err != nil {
		return Job{}, jobLookupError(found.ID, found.Namespace, err)
	}
	return Job{Spec: spec, Namespace: found.Namespace}, nil
}

// Job is a job's specification and the namespace it was found in (a specification
// may name none).
type Job struct {
	Spec      *onchange.JobSpec
	Namespace string
}

// OnChange is the job as config-change rollouts read it, in the namespace it was found in.
func (j Job) OnChange() onchange.JobSpec {
	oc := *j.Spec
	if oc.Namespace == "" {
		oc.Namespace = j.Namespace
	}
	return oc
}

// jobLookupError turns a failed lookup into one line that says what to do, in the words
// `run` uses for the same failures.
func jobLookupError(job, namespace string, err error) error {
	var amb *cluster.AmbiguousJobError
	switch {
	case errors.As(err, &amb):
		return fmt.Errorf("job prefix %q matched multiple jobs (%s); give the full job ID, or -namespace to pick one", job, strings.Join(amb.Matches, ", "))
	case errors.Is(err, cluster.ErrJobNotFound):
		//lint:ignore ST1005 Nomad's own wording, as run says it
		return fmt.Errorf("No job(s) with prefix or ID %q found in namespace %q; check the job ID and -namespace", job, NamespaceName(namespace))
	case errors.Is(err, cluster.ErrPermissionDenied):
		return fmt.Errorf("reading job %q: %s; the token needs read-job (and list-jobs for a prefix) in the namespace", job, output.OneLine(err.Error()))
	}
	return fmt.Errorf("reading job %q: %w", job, output.Flat(err))
}

// NamespaceName names a namespace in messages: the client's default is "default".
func NamespaceName(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
