// Package engine drives restarts: it plans a restart of a job's allocations, stores it, and
// runs it batch by batch against a Cluster, persisting its intent before every action and every
// observation after, so that any driver (this one after a crash, or another process) can resume
// it and restart each allocation exactly once. Operators steer a restart through its record.
//
// How the driver behaves step by step, and where it departs from `nomad job restart` on
// purpose, is told in docs/architecture.md ("The driver, step by step").
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Config wires an Engine.
type Config struct {
	Cluster cluster.Cluster
	Store   store.Store
	Logger  *slog.Logger // nil: discard
	// Holder names this driver for humans (host:pid); empty: derived from the host name and pid.
	Holder string
	// Now is the local clock for record timestamps and batch waits only (never compared with
	// Nomad's clock); nil: time.Now.
	Now func() time.Time
	// Health wires the checks gate; its zero value reads checks through Cluster, Consul
	// from the environment, and estimates Nomad's clock.
	Health HealthConfig
	// MaxFeeds bounds the event streams the engine's drivers hold at once (0: 8); a fleet
	// driving many children in one process raises it to its parallel limit, within the
	// process's budget of blocking connections.
	MaxFeeds int
	// Gates wires the metric gates (-gate): how to reach Prometheus.
	Gates GatesConfig
	// Balancers wires the drain's evidence (-drain-until) and the agent's defaults.
	Balancers BalancersConfig
	// Retry bounds how long a driver keeps sending a request again that Nomad failed in a
	// way that passes (a restart, a stop, an evaluation, a surge's scale): its MaxElapsed,
	// after which the step fails with a warning in the record (zero: the MaxElapsed of
	// cluster.DefaultRetryPolicy, a minute).
	Retry cluster.RetryPolicy
	// Outbox hears, after each write, the events it stored, so that the notifications
	// they call for are sent (off the restart's path: it must return at once); nil: none.
	Outbox Outbox
}

// Outbox is told of a restart's events once they are stored (notify/deliver's Outbox).
type Outbox interface {
	Stored(namespace, id string, events []restart.Event)
}

// Engine plans, drives and steers restarts.
type Engine struct {
	cluster cluster.Cluster
	store   store.Store
	log     *slog.Logger
	holder  string
	now     func() time.Time
	health  HealthConfig
	gates   GatesConfig
	bal     BalancersConfig
	retry   cluster.RetryPolicy
	offset  *health.OffsetClock
	feeds   chan struct{} // a token per driver's allocation feed (maxFeeds)
	outbox  Outbox
	// live are the drivers running in this engine, by namespace and ID (Note).
	liveMu sync.Mutex
	live   map[string]*driver
}

// Note appends ev to the log of a restart a driver of this engine drives now, written
// before it returns; false when none does (the caller may write a record no one drives).
// It is how the notifier records a notification it gave up, in the log the driver owns.
func (e *Engine) Note(ctx context.Context, namespace, id string, ev restart.Event) bool {
	e.liveMu.Lock()
	d := e.live[namespace+"\x00"+id]
	e.liveMu.Unlock()
	if d == nil {
		return false
	}
	// Held while the step writes: the drive does not end, and give its lease up, meanwhile.
	d.noteMu.RLock()
	defer d.noteMu.RUnlock()
	if d.ended {
		return false
	}
	return d.step(ctx, func(*restart.Record) { d.eventLocked(ev) }) == nil
}

// setLive registers d as running (on) or not.
func (e *Engine) setLive(d *driver, on bool) {
	e.liveMu.Lock()
	defer e.liveMu.Unlock()
	key := d.ns + "\x00" + d.id
	switch {
	case on:
		if e.live == nil {
			e.live = map[string]*driver{}
		}
		e.live[key] = d
	case e.live[key] == d:
		delete(e.live, key)
	}
}

// New returns an Engine.
func New(cfg Config) *Engine {
	e := &Engine{cluster: cfg.Cluster, store: cfg.Store, log: cfg.Logger, holder: cfg.Holder, now: cfg.Now,
		health: cfg.Health, gates: cfg.Gates, bal: cfg.Balancers, retry: cfg.Retry, offset: cfg.Health.Estimate, feeds: make(chan struct{}, cmp.Or(cfg.MaxFeeds, maxFeeds)),
		outbox: cfg.Outbox}
	if e.offset == nil {
		e.offset = health.NewOffsetClock(nil)
	}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.retry.MaxElapsed <= 0 {
		e.retry.MaxElapsed = cluster.DefaultRetryPolicy().MaxElapsed // bounded, always
	}
	if e.holder == "" {
		host, _ := os.Hostname()
		e.holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return e
}

// Request asks for a restart of a job.
type Request struct {
	Namespace string // as given by -namespace ("" = client default; "*" allowed for prefix lookup)
	Job       string // ID or unique prefix
	Spec      restart.Spec
	// Exact says Job is a full job ID in Namespace, read without a listing.
	Exact bool
	// ID is the record's ID; "" gives a new random one. A fleet derives its children's.
	ID string
}

// Plan is a restart ready to be created.
type Plan struct {
	Record  *restart.Record // status pending, not yet stored; Allocs in batch order; Record.ID a new UUID
	Job     *restart.Job
	Skipped []Skip // for -verbose "Skipping allocation ..." lines
	// Warnings say where requests will be lost whatever the restart does (a service
	// without shutdown_delay, Nomad's own service provider), and how to avoid it.
	Warnings []string
}

// Skip is an allocation left out of the plan. Reason is the text that follows
// "Skipping allocation <id> because ".
type Skip struct {
	Alloc  *restart.Alloc
	Reason string
}

// Plan resolves the job, refuses what Nomad refuses (sysbatch with -reschedule, an active
// deployment), checks that the requested groups and tasks exist, and selects and batches the
// allocations. It changes nothing in the cluster. Errors are one line naming the problem and
// the fix.
func (e *Engine) Plan(ctx context.Context, req Request) (*Plan, error) {
	spec := normalizeSpec(req.Spec)
	job, facts, err := e.planReads(ctx, req, spec)
	if err != nil {
		return nil, err
	}
	versions, allocs := facts.versions, facts.allocs
	kept, skipped := restart.Select(allocs, versions, restart.Selection{Groups: spec.Groups, Tasks: spec.Tasks, StartedBefore: spec.StartedBefore, CreatedBeforeIndex: spec.CreatedBeforeIndex, OnlyAllocs: spec.OnlyAllocs})
	kept, untargeted, err := e.target(ctx, spec, job, kept)
	if err != nil {
		return nil, err
	}
	if err := e.resolveHealth(ctx, &spec, job, kept, facts.spec, facts.specErr); err != nil {
		return nil, err
	}
	if err := e.resolveDrain(ctx, &spec, job, kept, facts.spec); err != nil {
		return nil, err
	}
	if err := e.resolveGates(&spec); err != nil {
		return nil, err
	}

	region := job.Region
	if region == "" {
		region = e.cluster.Region()
	}
	now := e.now()
	rec := &restart.Record{
		ID:           cmp.Or(req.ID, uuid.NewString()),
		Namespace:    job.Namespace,
		Region:       region,
		JobID:        job.ID,
		JobType:      job.Type,
		JobVersion:   job.Version,
		Spec:         spec,
		Status:       restart.StatusPending,
		BatchWait:    spec.BatchWait,
		BatchWaitAsk: spec.BatchWaitAsk,
		Control:      restart.Control{Intent: restart.IntentRun},
		CreateTime:   now,
		ModifyTime:   now,
	}
	for _, a := range kept {
		p := restart.AllocProgress{ID: a.ID, Name: a.Name, Group: a.Group, NodeID: a.NodeID, State: restart.AllocPending}
		if len(spec.Tasks) > 0 {
			p.Tasks = restart.TasksToRestart(a, versions, spec.Tasks)
		}
		rec.Allocs = append(rec.Allocs, p)
	}
	rec.Batches = restart.AssignBatches(rec.Allocs, spec.BatchSizes)
	if err := restart.BudgetPlanRefusal(rec, job); err != nil {
		return nil, err
	}
	plan := &Plan{Record: rec, Job: job}
	if facts.spec != nil {
		plan.Warnings = TrafficWarnings(facts.spec, targetGroups(kept), spec)
		for _, w := range plan.Warnings {
			rec.AppendEvent(restart.Event{Time: now, Type: restart.EventWarning, Message: "Warning: " + w})
		}
	}
	for _, s := range skipped {
		plan.Skipped = append(plan.Skipped, Skip{Alloc: s.Alloc, Reason: s.Reason})
	}
	plan.Skipped = append(plan.Skipped, untargeted...)
	return plan, nil
}

// planInputs are what a plan reads of a job besides the job itself.
type planInputs struct {
	versions map[uint64]*restart.Job
	allocs   []*restart.Alloc
	// spec is the job's full specification, read for the health gate's options unless
	// -health none; specErr is why it could not be read (resolveHealth decides).
	spec    *onchange.JobSpec
	specErr error
	// The reads' failures, judged in the order of the checks by planChecks.
	versionsErr, deployErr, allocsErr error
}

// planningView is the job's view that the engine plans with, from its specification: one
// read of a job serves both. namespace is the one it was read in, for a specification
// that names none. Nil when the specification carries no view.
func planningView(spec *onchange.JobSpec, namespace string) *restart.Job {
	if spec.Job == nil {
		return nil
	}
	job := *spec.Job
	job.Namespace = cmp.Or(job.Namespace, namespace)
	return &job
}

// planReads reads the job and what a plan needs of it, and refuses what Nomad refuses
// before looking at allocations. The reads that do not depend on each other are sent at
// once, so that a plan costs one round trip for them (a fleet plans a job each time a slot
// frees): the job's versions, the deployment check, its allocations, and its full
// specification. A job named by its exact ID (a fleet's) is read with them, from the
// specification when that is read anyway; one named by a prefix is resolved first.
func (e *Engine) planReads(ctx context.Context, req Request, spec restart.Spec) (*restart.Job, *planInputs, error) {
	var job *restart.Job
	if !req.Exact {
		j, err := e.resolveJob(ctx, req)
		if err != nil {
			return nil, nil, e.jobLookupError(req, err)
		}
		if err := refuseReschedule(j, spec); err != nil {
			return nil, nil, err
		}
		job = j
	}
	ns, id := req.Namespace, req.Job
	if job != nil {
		ns, id = job.Namespace, job.ID
	}
	var (
		in     planInputs
		jobErr error
		wg     sync.WaitGroup
	)
	wg.Go(func() { in.versions, in.versionsErr = e.cluster.JobVersions(ctx, ns, id) })
	wg.Go(func() { in.deployErr = e.checkDeployment(ctx, ns, id) })
	wg.Go(func() { in.allocs, _, in.allocsErr = e.cluster.JobAllocations(ctx, ns, id) })
	specFromJob := job == nil && spec.Health != restart.HealthNone && e.health.JobSpec == nil
	switch {
	case specFromJob:
		// One read serves both: the job's view is its specification's.
		wg.Go(func() {
			in.spec, in.specErr = e.jobSpec(ctx, ns, id)
			if in.specErr == nil {
				job = planningView(in.spec, ns)
			} else {
				jobErr = fmt.Errorf("reading job %q in namespace %q: %w", id, e.namespaceOf(ns), in.specErr)
			}
		})
	case job == nil:
		wg.Go(func() { job, jobErr = e.cluster.Job(ctx, ns, id) })
	}
	if spec.Health != restart.HealthNone && !specFromJob {
		wg.Go(func() { in.spec, in.specErr = e.jobSpec(ctx, ns, id) })
	}
	wg.Wait()
	if jobErr != nil {
		return nil, nil, e.jobLookupError(req, jobErr)
	}
	if err := refuseReschedule(job, spec); err != nil {
		return nil, nil, err
	}
	if err := planChecks(job, &in, spec); err != nil {
		return nil, nil, err
	}
	return job, &in, nil
}

// refuseReschedule is Nomad's refusal of -reschedule for a sysbatch job.
func refuseReschedule(job *restart.Job, spec restart.Spec) error {
	if spec.Reschedule && job.Type == "sysbatch" {
		//lint:ignore ST1005 Nomad's own wording, kept for parity with `nomad job restart`
		return fmt.Errorf("Jobs of type %q are not allowed to be rescheduled; restart job %q in place (without -reschedule)", job.Type, job.ID)
	}
	return nil
}

// planChecks judges the plan's reads in the order of the checks: the versions, the groups
// and tasks asked for, the deployment, the allocations.
func planChecks(job *restart.Job, in *planInputs, spec restart.Spec) error {
	if in.versionsErr != nil {
		return fmt.Errorf("reading the versions of job %q: %w", job.ID, in.versionsErr)
	}
	if in.versions == nil {
		in.versions = map[uint64]*restart.Job{}
	}
	if _, ok := in.versions[job.Version]; !ok {
		in.versions[job.Version] = job
	}
	if err := checkGroupsAndTasks(job, in.versions, spec); err != nil {
		return err
	}
	if in.deployErr != nil {
		return in.deployErr
	}
	if in.allocsErr != nil {
		return fmt.Errorf("reading the allocations of job %q: %w", job.ID, in.allocsErr)
	}
	return nil
}

// resolveJob reads the job the request names: by its exact ID when the caller knows it
// (a fleet's child), so that a job purged meanwhile is never mistaken for another one its ID
// prefixes; else by ID or unique prefix, as Nomad's command does.
func (e *Engine) resolveJob(ctx context.Context, req Request) (*restart.Job, error) {
	if req.Exact {
		return e.cluster.Job(ctx, req.Namespace, req.Job)
	}
	return e.cluster.ResolveJob(ctx, req.Namespace, req.Job)
}

// normalizeSpec fills what a spec may lack. Every entry point hands the engine a spec that
// restart.Options.Resolve made, so this serves records written by older versions (and
// tests): an unset health gate is "running", the strictest that needs no check.
func normalizeSpec(s restart.Spec) restart.Spec {
	if s.Health == "" {
		s.Health = restart.HealthRunning
	}
	if s.OnError == "" {
		s.OnError = restart.OnErrorAsk
	}
	if s.HealthyDeadline <= 0 {
		s.HealthyDeadline = restart.DefaultHealthyDeadline
	}
	return s
}

// namespaceOf names the namespace a request for ns goes to: the client's own when ns is ""
// (-namespace or NOMAD_NAMESPACE).
func (e *Engine) namespaceOf(ns string) string {
	if ns == "" {
		return e.cluster.Namespace()
	}
	return ns
}

func (e *Engine) jobLookupError(req Request, err error) error {
	var amb *cluster.AmbiguousJobError
	switch {
	case errors.As(err, &amb):
		return fmt.Errorf("job prefix %q matched multiple jobs (%v); give the full job ID, or -namespace to pick one", req.Job, amb.Matches)
	case errors.Is(err, cluster.ErrJobNotFound):
		// Nomad's own wording, kept for parity with `nomad job restart`.
		return &jobNotFoundError{text: fmt.Sprintf("No job(s) with prefix or ID %q found in namespace %q; check the job ID and -namespace", req.Job, e.namespaceOf(req.Namespace))}
	case errors.Is(err, cluster.ErrPermissionDenied):
		return fmt.Errorf("looking up job %q: %w; the token needs read-job (and list-jobs for a prefix) in the namespace", req.Job, err)
	}
	return fmt.Errorf("looking up job %q: %w", req.Job, err)
}

func nsName(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// checkGroupsAndTasks refuses -group and -task names that no version of the job defines:
// Nomad's command silently restarts nothing, which hides a typo.
func checkGroupsAndTasks(job *restart.Job, versions map[uint64]*restart.Job, spec restart.Spec) error {
	groups := map[string]bool{}
	for _, v := range versions {
		for _, g := range v.Groups {
			groups[g.Name] = true
		}
	}
	for _, g := range spec.Groups {
		if !groups[g] {
			return fmt.Errorf("group %q not found in job %q; its groups are %v", g, job.ID, groupNames(job))
		}
	}
	want := map[string]bool{}
	for _, g := range spec.Groups {
		want[g] = true
	}
	for _, t := range spec.Tasks {
		found := false
		for _, v := range versions {
			for _, g := range v.Groups {
				if (len(want) == 0 || want[g.Name]) && g.HasTask(t) {
					found = true
				}
			}
		}
		if !found {
			return fmt.Errorf("task %q not found in the selected groups of job %q; check -task and -group", t, job.ID)
		}
	}
	return nil
}

func groupNames(j *restart.Job) []string {
	var out []string
	for _, g := range j.Groups {
		out = append(out, g.Name)
	}
	return out
}

// checkDeployment refuses to restart while a deployment of the job runs, as Nomad does.
func (e *Engine) checkDeployment(ctx context.Context, ns, jobID string) error {
	d, err := e.cluster.ActiveDeployment(ctx, ns, jobID)
	if err != nil {
		return fmt.Errorf("checking the deployments of job %q: %w", jobID, err)
	}
	if d != nil {
		return &DeploymentError{ID: d.ID, Status: d.Status}
	}
	return nil
}

// DeploymentError says a deployment of the job is not terminal.
type DeploymentError struct{ ID, Status string }

func (e *DeploymentError) Error() string {
	return fmt.Sprintf("Deployment %q is %q; wait for it to finish (or fail or cancel it), then restart", short(e.ID), e.Status)
}

// Create stores the planned record (pending) for whoever drives it (an agent, or `resume`);
// it fails with *store.JobBusyError if the job has a restart in progress. A process that
// drives the restart it files uses CreateHeld.
func (e *Engine) Create(ctx context.Context, rec *restart.Record) error {
	e.stampCreated(rec)
	return e.created(rec, e.store.Create(ctx, rec))
}

// Held is a restart this engine created with its lease (CreateHeld): no other driver can
// take it up until DriveHeld has driven it, or Release gave it up.
type Held struct {
	rec   *restart.Record
	lease store.Lease
}

// Record is the restart as it was created.
func (h *Held) Record() *restart.Record { return h.rec }

// Release gives the lease up without driving the restart: another driver (an agent) may
// take it up at once. DriveHeld releases it itself.
func (h *Held) Release(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return h.lease.Release(rctx)
}

// CreateHeld is Create for a process that drives the restart it files (`run` in the
// foreground, a fleet's children in the CLI): the store takes the restart's lease before it
// writes the record, so that no agent, which adopts the restarts whose lease is free, ever
// takes it up first. DriveHeld drives it with that lease.
func (e *Engine) CreateHeld(ctx context.Context, rec *restart.Record) (*Held, error) {
	e.stampCreated(rec)
	lease, err := e.store.CreateLeased(ctx, rec, e.holder)
	if err := e.created(rec, err); err != nil {
		return nil, err
	}
	return &Held{rec: rec, lease: lease}, nil
}

// stampCreated appends the record's created event, unless it has one already.
func (e *Engine) stampCreated(rec *restart.Record) {
	if !slices.ContainsFunc(rec.Events, func(ev restart.Event) bool { return ev.Type == restart.EventCreated }) {
		rec.AppendEvent(restart.Event{Time: e.now(), Type: restart.EventCreated,
			Message: fmt.Sprintf("Restart of job %q created: %s in %d %s", rec.JobID,
				plural(len(rec.Allocs), "allocation"), rec.Batches, pluralWord(rec.Batches, "batch", "batches"))})
	}
}

// created turns the store's answer to a creation of rec into Create's.
func (e *Engine) created(rec *restart.Record, err error) error {
	if err != nil {
		var busy *store.JobBusyError
		if errors.As(err, &busy) {
			return err // already one line naming the restart in progress and the fix
		}
		return fmt.Errorf("storing restart of job %q: %w", rec.JobID, err)
	}
	e.log.Info("restart created", "restart", rec.ID, "job", rec.JobID, "namespace", rec.Namespace, "allocs", len(rec.Allocs), "batches", rec.Batches)
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func plural(n int, word string) string {
	return fmt.Sprintf("%d %s", n, pluralWord(n, word, word+"s"))
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// jobNotFoundError keeps Nomad's wording while letting callers match
// cluster.ErrJobNotFound (a fleet records a job purged before its turn as skipped).
type jobNotFoundError struct{ text string }

func (e *jobNotFoundError) Error() string { return e.text }
func (e *jobNotFoundError) Unwrap() error { return cluster.ErrJobNotFound }
