package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Lister lists jobs with Nomad's filter expressions (cluster.Nomad.SelectJobs).
type Lister interface {
	SelectJobs(ctx context.Context, namespace, filter string) ([]cluster.JobStub, error)
}

// Selected is a fleet's selection before it is recorded.
type Selected struct {
	// Jobs are the selected jobs, in the fleet's order.
	Jobs []fleet.Job
	// LeftOut names the matching jobs a fleet cannot restart themselves (periodic and
	// parameterized jobs: their launches are jobs of their own, selected when they match).
	LeftOut []string
	// Outside are the upstreams of the selected jobs that the selection does not hold:
	// not restarted, they must be healthy before their downstream jobs start.
	Outside []fleet.Upstream
}

// Select lists the jobs sel matches (only those the token may list: Nomad filters its
// list by the token's ACLs), orders them, and refuses, naming the job and the fix, a
// selection the fleet's options cannot apply to. Nothing is written.
func Select(ctx context.Context, l Lister, sel fleet.Selection, spec restart.Spec, opts fleet.Options) (*Selected, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	stubs, err := l.SelectJobs(ctx, sel.Namespace, sel.Filter)
	if err != nil {
		return nil, err
	}
	out := &Selected{}
	var listed []fleet.Job
	for _, s := range stubs {
		if s.Periodic || s.ParameterizedJob {
			out.LeftOut = append(out.LeftOut, fmt.Sprintf("%s (namespace %q)", s.ID, s.Namespace))
			continue
		}
		listed = append(listed, fleet.Job{Namespace: s.Namespace, JobID: s.ID, Type: s.Type, Priority: s.Priority,
			Meta: ownMeta(s.Meta), Status: fleet.JobPending})
	}
	if len(listed) == 0 {
		return nil, &EmptySelectionError{Selection: sel, LeftOut: len(out.LeftOut)}
	}
	if err := checkApplies(listed, spec); err != nil {
		return nil, err
	}
	ordered, err := fleet.Order(listed, opts.Order)
	if err != nil {
		return nil, err
	}
	out.Jobs, out.Outside, err = planWaves(ctx, l, ordered, opts)
	return out, err
}

// planWaves sorts the ordered jobs into waves by their upstreams (their meta
// nomad-restart.after and -after), asking Nomad whether an upstream outside the selection
// exists.
func planWaves(ctx context.Context, l Lister, jobs []fleet.Job, opts fleet.Options) ([]fleet.Job, []fleet.Upstream, error) {
	var meta []fleet.Named
	for _, j := range jobs {
		v, ok := j.Meta[onchange.KeyAfter]
		if !ok {
			continue
		}
		ups, err := fleet.ParseUpstreams(v)
		if err != nil {
			// Not met from Select: checkApplies refused it first, as a meta problem.
			return nil, nil, fmt.Errorf("job %q (namespace %q): meta %s: %w", j.JobID, j.Namespace, onchange.KeyAfter, err)
		}
		meta = append(meta, fleet.Named{Job: fleet.RefOf(j), Upstreams: ups})
	}
	var lookupErr error
	exists := func(r fleet.Ref) bool {
		found, err := l.SelectJobs(ctx, r.Namespace, "ID == "+strconv.Quote(r.JobID))
		if err != nil && !errors.Is(err, cluster.ErrJobNotFound) && lookupErr == nil {
			lookupErr = fmt.Errorf("looking up upstream %q (namespace %q): %w", r.JobID, r.Namespace, err)
		}
		return len(found) > 0
	}
	out, outside, err := fleet.PlanWaves(jobs, meta, opts.After, opts.AfterOutside, exists)
	if lookupErr != nil {
		return nil, nil, lookupErr
	}
	return out, outside, err
}

// EmptySelectionError says a selection matched no job the fleet could restart.
type EmptySelectionError struct {
	Selection fleet.Selection
	LeftOut   int
}

func (e *EmptySelectionError) Error() string {
	ns := e.Selection.Namespace
	if ns == "" {
		ns = "default"
	}
	msg := fmt.Sprintf("-jobs %q selected no job in namespace %q", e.Selection.Filter, ns)
	if e.LeftOut > 0 {
		msg += fmt.Sprintf(" but %d periodic or parameterized jobs, whose launches are jobs of their own", e.LeftOut)
	}
	return msg + "; check the expression with `nomad job list -filter '...'`, and -namespace ('*' for every namespace the token may list)"
}

// ownMeta keeps the job's nomad-restart.* meta keys: the only ones a fleet reads.
func ownMeta(meta map[string]string) map[string]string {
	var out map[string]string
	for k, v := range meta {
		if strings.HasPrefix(k, onchange.MetaPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// checkApplies refuses options that cannot apply to a selected job, and a job whose own
// nomad-restart.* meta cannot be read, before anything is written.
func checkApplies(jobs []fleet.Job, spec restart.Spec) error {
	var problems []string
	for _, j := range jobs {
		js, metaProblems := onchange.JobOptions(spec, j.Meta)
		if len(metaProblems) > 0 {
			problems = append(problems, fmt.Sprintf("job %q (namespace %q): %s; fix the job's meta or leave the job out of -jobs", j.JobID, j.Namespace, metaProblems[0]))
			continue
		}
		if p := typeProblem(j, js); p != "" {
			problems = append(problems, p)
		}
	}
	switch len(problems) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s", problems[0])
	}
	more := "jobs"
	if len(problems) == 2 {
		more = "job"
	}
	return fmt.Errorf("%s (and %d more %s)", problems[0], len(problems)-1, more)
}

// typeProblem is what Nomad or the engine would refuse of spec for the job's type.
func typeProblem(j fleet.Job, spec restart.Spec) string {
	switch {
	case spec.Surge > 0 && j.Type != "service":
		return fmt.Sprintf(`-surge scales service jobs only, and job %q (namespace %q) is a %s job; drop -surge or narrow -jobs (add: and Type == "service")`, j.JobID, j.Namespace, j.Type)
	case spec.Reschedule && j.Type == "sysbatch":
		return fmt.Sprintf(`jobs of type "sysbatch" are not allowed to be rescheduled, and job %q (namespace %q) is one; drop -reschedule or narrow -jobs (add: and Type != "sysbatch")`, j.JobID, j.Namespace)
	}
	return ""
}

// NewRecord is the pending fleet of a selection (its jobs, in waves when ordered, and their
// upstreams outside it), to be stored with Fleets.CreateFleet. Its
// home is namespace (the one -namespace named, or "default" for "*").
func NewRecord(id, home string, sel fleet.Selection, spec restart.Spec, opts fleet.Options, jobs []fleet.Job, outside []fleet.Upstream, clusterAddr string, now time.Time) *fleet.Record {
	rec := &fleet.Record{
		Fleet:      fleet.Fleet{ID: id, Options: opts, Jobs: jobs, Outside: outside, Status: restart.StatusPending, Control: restart.Control{Intent: restart.IntentRun}},
		Namespace:  home,
		Selection:  sel,
		Spec:       spec,
		Cluster:    clusterAddr,
		CreateTime: now,
		ModifyTime: now,
	}
	rec.AddEvent(now, restart.EventCreated, fmt.Sprintf("Fleet created: %d jobs selected by -jobs %q", len(jobs), sel.Filter))
	return rec
}

// HomeNamespace is where a fleet of selection namespace ns is recorded: that namespace, or
// "default" when the selection spans namespaces ("*").
func HomeNamespace(ns string) string {
	if ns == "" || ns == "*" {
		return "default"
	}
	return ns
}

// JobPlan is one job's part of a fleet's dry-run plan.
type JobPlan struct {
	Job fleet.Job
	// Spec is the options its child would start with (the fleet's, with the job's meta).
	Spec restart.Spec
	// Allocs and Batches are what its restart would take now.
	Allocs, Batches int
	// Problem says why the job would not restart now ("" when it would).
	Problem string
}

// Plan is a fleet's dry run: each job's restart as it would be planned now. It writes
// nothing; a job's plan may differ when its turn comes (its allocations then).
func (d *Driver) Plan(ctx context.Context, rec *fleet.Record) []JobPlan {
	out := make([]JobPlan, len(rec.Jobs))
	for i, j := range rec.Jobs {
		spec, _ := onchange.JobOptions(rec.Spec, j.Meta)
		out[i] = JobPlan{Job: j, Spec: spec}
		p, err := d.planJob(ctx, j, "", spec)
		dc, outside := outsideDatacenter(err)
		switch {
		case outside:
			out[i].Problem = fmt.Sprintf("no allocation to restart (it does not run in datacenter %q): it would be skipped", dc)
			continue
		case err != nil:
			out[i].Problem = oneLine(err.Error())
			continue
		}
		out[i].Allocs, out[i].Batches = len(p.Record.Allocs), p.Record.Batches
		if out[i].Allocs == 0 {
			out[i].Problem = "no allocation to restart: it would be skipped"
		}
	}
	return out
}

// planJob plans job's restart as its child starts when its turn comes: the job's exact ID,
// spec (the fleet's options with the job's meta), and -surge's refusals (scaling policy,
// bounds) as run gives them. The dry run (Plan) and the driver share it, so what the dry
// run shows is what the driver files; id is the child's ID ("" for the dry run).
func (d *Driver) planJob(ctx context.Context, job fleet.Job, id string, spec restart.Spec) (*engine.Plan, error) {
	p, err := d.cfg.Engine.Plan(ctx, engine.Request{Namespace: job.Namespace, Job: job.JobID, Exact: true, ID: id, Spec: spec})
	if err == nil {
		err = d.cfg.Engine.CheckSurge(ctx, p)
	}
	return p, err
}

// outsideDatacenter returns the datacenter of the fleet's options that err says the job
// does not run in: a job with nothing to restart there, skipped rather than failed.
func outsideDatacenter(err error) (string, bool) {
	var target *engine.TargetError
	if errors.As(err, &target) && target.OfJob {
		return target.Value, true
	}
	return "", false
}
