package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Scaler is what -surge needs of Nomad: a job's group counts, the job scale endpoint, and
// its deployments.
type Scaler interface {
	// JobScale reads the job's current version: its type, JobModifyIndex and each group's
	// count, scaling policy and update strategy; and, where the cluster can tell, the most
	// allocations Nomad lets the job have in all (job_max_count).
	JobScale(ctx context.Context, namespace, jobID string) (*restart.JobScale, error)
	// ScaleGroup sets a group's count through Nomad's job scale endpoint (a scaling event
	// with message, a new job version, an evaluation). A non-zero jobModifyIndex is Nomad's
	// check-and-set: the request fails with ErrScaleConflict when the job changed since.
	// It never sends the request twice. Errors: ErrPermissionDenied (the token lacks
	// scale-job and submit-job), ErrScaleConflict, ErrScaleBlocked (a deployment of the job
	// is active), *JobMaxCountError (the job would pass its servers' job_max_count), or
	// Nomad's own.
	ScaleGroup(ctx context.Context, namespace, jobID, group string, count int, jobModifyIndex uint64, message string) (*ScaleResult, error)
	// LatestDeployment blocks until the job's latest deployment changes past afterIndex (0:
	// at once), then returns it (nil when the job has none) and the index to watch from.
	LatestDeployment(ctx context.Context, namespace, jobID string, afterIndex uint64) (*DeploymentState, uint64, error)
	// FailDeployment marks a deployment failed (`nomad deployment fail`).
	FailDeployment(ctx context.Context, namespace, deploymentID string) error
}

// ScaleResult is Nomad's answer to a scale request.
type ScaleResult struct {
	EvalID string
	// JobModifyIndex is the job's new JobModifyIndex; the deployment Nomad makes for the
	// new version carries it as JobSpecModifyIndex.
	JobModifyIndex uint64
}

// DeploymentState is what a surge needs of a deployment.
type DeploymentState struct {
	ID                 string
	Status             string
	StatusDescription  string
	JobVersion         uint64
	JobSpecModifyIndex uint64
}

// Active reports whether the deployment is still in progress.
func (d *DeploymentState) Active() bool { return deploymentActive(d.Status) }

// deploymentActive reports whether a deployment of status is not terminal (neither
// successful, failed nor cancelled), as Nomad's command checks before restarting.
func deploymentActive(status string) bool {
	switch status {
	case api.DeploymentStatusSuccessful, api.DeploymentStatusFailed, api.DeploymentStatusCancelled:
		return false
	}
	return true
}

// Errors of ScaleGroup, to be matched with errors.Is.
var (
	// ErrScaleConflict: the job changed since the JobModifyIndex sent (check-and-set).
	ErrScaleConflict = errors.New("job modified since it was read")
	// ErrScaleBlocked: Nomad refuses to scale while a deployment of the job is active.
	ErrScaleBlocked = errors.New("job scaling blocked due to active deployment")
)

var _ Scaler = (*Nomad)(nil)

// JobScale reads the job's current version.
func (n *Nomad) JobScale(ctx context.Context, namespace, jobID string) (*restart.JobScale, error) {
	job, err := n.readJob(ctx, namespace, jobID)
	if err != nil {
		return nil, err
	}
	js := jobScale(job)
	js.MaxCount = n.jobMaxCount(ctx)
	return js, nil
}

func jobScale(job *api.Job) *restart.JobScale {
	out := &restart.JobScale{ID: scaleDeref(job.ID), Type: scaleDeref(job.Type), Stopped: scaleDeref(job.Stop), Version: scaleDeref(job.Version),
		JobModifyIndex: scaleDeref(job.JobModifyIndex), Groups: map[string]restart.GroupScale{}}
	if out.Type == "" {
		out.Type = api.JobTypeService
	}
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil {
			continue
		}
		g := restart.GroupScale{Count: scaleDeref(tg.Count)}
		if s := tg.Scaling; s != nil {
			// Nomad holds a scale within the block's bounds even when the policy is
			// disabled; only an enabled one means an autoscaler manages the count.
			g.Scaling = s.Enabled == nil || *s.Enabled
			g.Bounded = true
			g.Min, g.Max = scaleDeref(s.Min), scaleDeref(s.Max)
		}
		// The job's update block is merged into its groups by Nomad's canonicalization;
		// read both, as a job read back carries the group's.
		u := tg.Update
		if u == nil {
			u = job.Update
		}
		g.Rolling = u != nil && (u.MaxParallel == nil || *u.MaxParallel > 0)
		out.Groups[*tg.Name] = g
	}
	return out
}

// ScaleGroup sets a group's count with the job scale endpoint.
func (n *Nomad) ScaleGroup(ctx context.Context, namespace, jobID, group string, count int, jobModifyIndex uint64, message string) (*ScaleResult, error) {
	c := int64(count)
	req := &api.ScalingRequest{
		Count:          &c,
		Target:         map[string]string{"Job": jobID, "Group": group},
		Message:        message,
		JobModifyIndex: jobModifyIndex,
	}
	resp, err := write(ctx, n, "scaling group", func(ctx context.Context) (*api.JobRegisterResponse, error) {
		r, _, err := n.client.Jobs().ScaleWithRequest(jobID, req, (&api.WriteOptions{Namespace: namespace}).WithContext(ctx))
		return r, err
	})
	if err != nil {
		err = classifyScale(err)
		if tooMany, ok := errors.AsType[*JobMaxCountError](err); ok {
			n.learnJobMaxCount(tooMany)
		}
		return nil, fmt.Errorf("scaling group %q of job %q to %d: %w", group, jobID, count, err)
	}
	return &ScaleResult{EvalID: resp.EvalID, JobModifyIndex: resp.JobModifyIndex}, nil
}

// classifyScale maps the scale endpoint's refusals onto the package's sentinels. Nomad
// answers a failed check-and-set with a 500 whose body names the conflicting index, a count
// past job_max_count with a 500 that names it, and an active deployment with a 400.
func classifyScale(err error) error {
	body := responseBody(err)
	if tooMany := asJobMaxCount(err); tooMany != nil {
		return tooMany
	}
	switch {
	case strings.Contains(body, "conflicting job modify index"):
		return &kindError{kind: ErrScaleConflict, err: err}
	case statusCode(err) == http.StatusBadRequest && strings.Contains(body, "blocked due to active deployment"):
		return &kindError{kind: ErrScaleBlocked, err: err}
	}
	return classify(err, ErrJobNotFound)
}

// LatestDeployment follows the job's latest deployment with a blocking query.
// FailDeployment marks a deployment failed, as `nomad deployment fail` does, so that Nomad
// accepts a new scale of its job.
func (n *Nomad) FailDeployment(ctx context.Context, namespace, deploymentID string) error {
	_, err := write(ctx, n, "failing deployment", func(ctx context.Context) (struct{}, error) {
		wo := (&api.WriteOptions{Namespace: namespace}).WithContext(ctx)
		_, _, err := n.client.Deployments().Fail(deploymentID, wo)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("failing deployment %q: %w", deploymentID, classify(err, nil))
	}
	return nil
}

func (n *Nomad) LatestDeployment(ctx context.Context, namespace, jobID string, afterIndex uint64) (*DeploymentState, uint64, error) {
	d, index, err := watchRead(ctx, n, "reading the latest deployment", namespace, afterIndex, func(q *api.QueryOptions) (*api.Deployment, *api.QueryMeta, error) {
		return n.client.Jobs().LatestDeployment(jobID, q)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading the latest deployment of job %q: %w", jobID, classify(err, ErrJobNotFound))
	}
	if d == nil {
		return nil, index, nil
	}
	return &DeploymentState{ID: d.ID, Status: d.Status, StatusDescription: d.StatusDescription,
		JobVersion: d.JobVersion, JobSpecModifyIndex: d.JobSpecModifyIndex}, index, nil
}

// scaleDeref is *p, or the zero value for nil.
func scaleDeref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
