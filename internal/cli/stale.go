package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// staleOptions are the options of `nomad-restart stale`.
type staleOptions struct {
	client  clientFlags
	json    bool
	verbose bool
}

const helpStale = `
Usage: nomad-restart stale [options] [job...]

  List the running allocations that run with a stale render: Nomad re-rendered
  one of their templates after their tasks last started, so the tasks still
  run with what the template held before (the environment of an env = true
  template, a file the application reads once at its start). Each is listed
  with the template, when it was re-rendered, when its task started, and for
  how long it has been stale (by this machine's clock). Restart exactly those
  allocations with "nomad-restart run -stale-only <job>".

  Without jobs, every job of the namespace that has a template is read (every
  namespace the token may list with -namespace '*'); otherwise the jobs named,
  each an ID or a unique prefix, as "run" takes them. Every template is judged
  whatever the job's meta says:

    - change_mode noop: by its destination file's modification time, read
      through Nomad's allocation filesystem API (one listing per allocation
      and template directory). Nomad writes the file only when its content
      changed.
    - change_mode signal or script: by the task events Nomad records after
      the re-render.
    - change_mode restart is not followed: Nomad restarts the task itself at
      each re-render. Nor is a destination outside the allocation directory,
      which the filesystem API cannot read. Both are listed as not followed.

  Reading the files needs the namespace's read-fs capability. When the token
  lacks it everywhere it was needed, stale says so in one line and exits 1
  rather than call the allocations up to date; when some jobs' files were
  read, the others are named in a warning on stderr (and FilesDenied in
  -json) and the command goes on.

  Exits 0 whether or not allocations are stale (count them with -json); 1
  when a job cannot be read or found, or on bad input. Nothing is written.

General Options: Nomad's -address, -region, -namespace, -token and TLS
options, -request-timeout and -log-level (see "nomad-restart run -help").

Stale Options:

  -json
    Output an array of the jobs read, each with its Namespace, JobID, Allocs
    (each stale allocation's ID, Name, Group, StaleSince, StaleFor in
    nanoseconds, and Templates: Task, Destination, By "file" or "events",
    RenderedAt, TaskStartedAt), NotFollowed (Group, Task, Template,
    Destination, Reason) and FilesDenied. See docs/json.md.

  -verbose
    Full allocation IDs.
`

// staleCommand is `nomad-restart stale`.
type staleCommand struct{}

func (staleCommand) Synopsis() string {
	return "List allocations running with templates re-rendered since they started"
}
func (staleCommand) Help() string { return helpStale }

// Run is `nomad-restart stale [options] [job...]`: the running allocations with a
// template that Nomad re-rendered after their tasks last started, which therefore run with
// what the template held before (an environment file, a file read once at start). It only
// reads: jobs, their allocations and, for change_mode noop templates, the modification
// time of each destination file through Nomad's allocation filesystem API.
func (staleCommand) Run(ctx context.Context, a *app, args []string) error {
	var o staleOptions
	fs := newFlagSet("stale")
	o.client.add(fs)
	fs.BoolVar(&o.json, "json", false, "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
	if err := parseFlags(fs, "stale", args); err != nil {
		return err
	}
	o.client = o.client.withEnv(a.env)
	jobs, err := jobArgs(fs.Args())
	if err != nil {
		return err
	}
	nomad, err := a.openJobs(ctx, o.client)
	if err != nil {
		return err
	}
	specs, err := staleSpecs(ctx, nomad, o.client.namespace, jobs)
	if err != nil {
		return err
	}
	list, err := readStaleJobs(ctx, nomad, specs, a.now())
	if err != nil {
		return err
	}
	if err := allFilesDenied(list); err != nil {
		return err
	}
	for _, j := range list {
		if j.FilesDenied {
			fmt.Fprintf(a.stderr, "Warning: %s\n", filesDeniedText(j))
		}
	}
	if o.json {
		return output.WriteJSON(a.stdout, list)
	}
	printStale(a.stdout, list, o.client.namespace, len(jobs) > 0, o.verbose)
	return nil
}

// jobArgs takes the job IDs or prefixes stale reads, each once, in order; none means every
// job of the namespace.
func jobArgs(args []string) ([]string, error) {
	var out []string
	for _, arg := range args {
		job := strings.TrimSpace(arg)
		if job == "" {
			return nil, usageErrorf("empty job ID: give job IDs or unique prefixes (options go before them), or none for every job of the namespace")
		}
		if !slices.Contains(out, job) {
			out = append(out, job)
		}
	}
	return out, nil
}

// openJobs connects and returns the session's Nomad.
func (a *app) openJobs(ctx context.Context, cf clientFlags) (*cluster.Nomad, error) {
	ses, err := a.connect(ctx, cf)
	if err != nil {
		return nil, err
	}
	nomad := ses.jobCluster()
	if nomad == nil {
		return nil, errors.New("reading jobs' allocations and files needs Nomad's client, and this session has none")
	}
	return nomad, nil
}

// staleSpecs reads the specifications of the named jobs (IDs or unique prefixes, resolved
// as run resolves them), or of every job of namespace ("*": of every namespace the token
// may list) that has a template. A job gone between the list and its read is skipped.
func staleSpecs(ctx context.Context, nomad *cluster.Nomad, namespace string, jobs []string) ([]onchange.JobSpec, error) {
	var out []onchange.JobSpec
	seen := map[string]bool{}
	add := func(spec onchange.JobSpec) {
		if k := spec.Namespace + "/" + spec.ID; !seen[k] {
			seen[k] = true
			out = append(out, spec)
		}
	}
	if len(jobs) > 0 {
		for _, prefix := range jobs {
			job, err := resolveJobSpec(ctx, nomad, namespace, prefix)
			if err != nil {
				return nil, err
			}
			add(jobOnChange(job))
		}
		return out, nil
	}
	refs, err := nomad.ListJobs(ctx, namespace)
	if err != nil {
		if errors.Is(err, cluster.ErrPermissionDenied) {
			return nil, fmt.Errorf("%s; the token needs list-jobs and read-job in the namespace, or name the jobs", output.OneLine(err.Error()))
		}
		return nil, fmt.Errorf("%s; check -address and -namespace", output.OneLine(err.Error()))
	}
	for _, ref := range refs {
		spec, err := nomad.JobSpec(ctx, ref.Namespace, ref.ID)
		if errors.Is(err, cluster.ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, jobLookupError(ref.ID, ref.Namespace, err)
		}
		job := jobOnChange(resolvedJob{spec: spec, namespace: ref.Namespace})
		if hasTemplates(job) {
			add(job)
		}
	}
	return out, nil
}

func hasTemplates(job onchange.JobSpec) bool {
	for _, g := range job.Groups {
		for _, t := range g.Tasks {
			if len(t.Templates) > 0 {
				return true
			}
		}
	}
	return false
}

// staleJob is one job of `stale -json` (docs/schemas/stale.schema.json).
type staleJob struct {
	Namespace string
	JobID     string
	// Allocs are its running allocations with a template re-rendered after their tasks
	// started, in Nomad's order (newest first); empty when none.
	Allocs []staleAllocJSON
	// NotFollowed are its templates whose re-renders cannot be seen, and why.
	NotFollowed []notFollowedJSON
	// FilesDenied says the token may not read the allocations' files (the namespace's
	// read-fs capability): the templates followed by their file were not checked.
	FilesDenied bool

	// followed counts its templates followed by their renders; filesRead says some
	// allocation's files were read.
	followed  int
	filesRead bool
}

func (j staleJob) hasFollowed() bool { return j.followed > 0 }

// staleAllocJSON is a stale allocation: its templates re-rendered after their tasks
// started, since when (the oldest of those renders) and for how long until the reading.
type staleAllocJSON struct {
	ID         string
	Name       string
	Group      string
	Templates  []staleTemplateJSON
	StaleSince time.Time
	StaleFor   time.Duration
}

// staleTemplateJSON is one template re-rendered after its task last started.
type staleTemplateJSON struct {
	Task          string
	Destination   string
	By            onchange.FollowBy
	RenderedAt    time.Time
	TaskStartedAt time.Time
}

// notFollowedJSON is a template whose re-renders cannot be seen.
type notFollowedJSON struct {
	Group       string
	Task        string
	Template    int
	Destination string
	Reason      string
}

// staleCluster is what stale reads of Nomad (*cluster.Nomad).
type staleCluster interface {
	JobAllocations(ctx context.Context, namespace, jobID string) ([]*restart.Alloc, uint64, error)
	cluster.FileReader
}

// staleFileReads bounds the directory listings in flight at once, as the agent's
// MaxFileReads does: each is forwarded by a server to the allocation's client.
const staleFileReads = 4

// readStaleJobs reads each job in turn (readStale).
func readStaleJobs(ctx context.Context, c staleCluster, jobs []onchange.JobSpec, now time.Time) ([]staleJob, error) {
	out := make([]staleJob, 0, len(jobs))
	for _, job := range jobs {
		j, err := readStale(ctx, c, job, now)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// readStale finds the job's stale allocations: every template as "rendered" follows it
// (onchange.AllTemplates: whatever the job's meta says), the job's allocations, and the
// modification times of the files of templates followed by their file in each running
// allocation. A denial of the files is reported in FilesDenied, not as an error: the
// templates followed by their task events are still judged.
func readStale(ctx context.Context, c staleCluster, job onchange.JobSpec, now time.Time) (staleJob, error) {
	out := staleJob{Namespace: namespaceName(job.Namespace), JobID: job.ID, Allocs: []staleAllocJSON{}, NotFollowed: []notFollowedJSON{}}
	var followed []onchange.Followed
	paths := map[string][]string{} // by group
	for _, g := range job.Groups {
		// One group at a time, so that what cannot be followed keeps its group's name.
		f, not := onchange.AllTemplates(onchange.JobSpec{ID: job.ID, Namespace: job.Namespace, Meta: job.Meta, Groups: []onchange.GroupSpec{g}})
		followed = append(followed, f...)
		if p := onchange.FilePaths(f); len(p) > 0 {
			paths[g.Name] = p
		}
		for _, n := range not {
			out.NotFollowed = append(out.NotFollowed, notFollowedJSON{Group: g.Name, Task: n.Task, Template: n.Template, Destination: n.Destination, Reason: n.Reason})
		}
	}
	out.followed = len(followed)
	if len(followed) == 0 {
		return out, nil
	}
	allocs, _, err := c.JobAllocations(ctx, out.Namespace, job.ID)
	if err != nil {
		return staleJob{}, jobLookupError(job.ID, out.Namespace, err)
	}
	read := cluster.ReadFileTimes(ctx, c, allocs, paths, make(chan struct{}, staleFileReads))
	if err := ctx.Err(); err != nil {
		return staleJob{}, err
	}
	if err := firstFileFailure(read); err != nil && !read.Denied {
		return staleJob{}, fmt.Errorf("reading the template files of job %q: %s; check that the allocations' clients are connected (nomad node status), then try again", job.ID, output.OneLine(err.Error()))
	}
	out.FilesDenied = read.Denied
	out.filesRead = len(read.Times) > 0
	for _, s := range onchange.FindStale(followed, read.Times, allocs) {
		out.Allocs = append(out.Allocs, newStaleAlloc(s, now))
	}
	return out, nil
}

func newStaleAlloc(s onchange.StaleAlloc, now time.Time) staleAllocJSON {
	a := staleAllocJSON{ID: s.Alloc.ID, Name: s.Alloc.Name, Group: s.Alloc.Group, StaleSince: s.Since().UTC(), StaleFor: max(now.Sub(s.Since()), 0)}
	for _, t := range s.Templates {
		a.Templates = append(a.Templates, staleTemplateJSON{Task: t.Task, Destination: t.Destination, By: t.By, RenderedAt: t.RenderedAt.UTC(), TaskStartedAt: t.StartedAt.UTC()})
	}
	return a
}

// firstFileFailure is the failed read of the allocation with the smallest ID, named, so
// that the same failures always read the same; nil when none failed.
func firstFileFailure(read cluster.FileTimesRead) error {
	ids := slices.Sorted(maps.Keys(read.Failed))
	if len(ids) == 0 {
		return nil
	}
	return fmt.Errorf("allocation %s: %w", output.ShortID(ids[0], false), read.Failed[ids[0]])
}

// allFilesDenied is the one-line refusal of a reading whose every file read was denied: a
// listing that silently left out every change_mode noop template would say "nothing is
// stale" on no evidence. When some job's files were read, the denied ones are warned about
// instead.
func allFilesDenied(list []staleJob) error {
	var namespaces []string
	for _, j := range list {
		if j.filesRead {
			return nil
		}
		if j.FilesDenied && !slices.Contains(namespaces, j.Namespace) {
			namespaces = append(namespaces, j.Namespace)
		}
	}
	if len(namespaces) == 0 {
		return nil
	}
	return fmt.Errorf("the token may not read allocation files in namespace %s, and stale compares the files of change_mode noop templates with their tasks' starts: grant it the read-fs capability on the namespace (see docs/acl.md)",
		quotedList(namespaces))
}

// filesDeniedText says that a job's files could not be read, and what that leaves out.
func filesDeniedText(j staleJob) string {
	return fmt.Sprintf("job %q: the token may not read allocation files in namespace %q (the read-fs capability), so its templates with change_mode noop were not checked", j.JobID, j.Namespace)
}

func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// selectStale is run -stale-only's selection: the job's stale allocations, read as
// `stale` reads them, become the spec's OnlyAllocs (empty, not nil, when none is stale,
// so that the plan keeps none); o.job and the namespace become the job found, so that the
// plan reads the job that was read.
func (a *app) selectStale(ctx context.Context, p *output.Printer, ses session, o *runOptions) error {
	nomad := ses.jobCluster()
	if nomad == nil {
		return errors.New("-stale-only reads the allocations' template files, and this session has no Nomad client")
	}
	job, err := resolveJobSpec(ctx, nomad, o.client.namespace, o.job)
	if err != nil {
		return err
	}
	j, err := readStale(ctx, nomad, jobOnChange(job), a.now())
	if err != nil {
		return err
	}
	if j.FilesDenied {
		// Some stale allocations would go unseen: restarting the others only would look
		// complete and is not.
		return fmt.Errorf("the token may not read the allocation files of job %q in namespace %q, so -stale-only cannot tell which allocations run a change_mode noop template stale: grant it the read-fs capability on the namespace (see docs/acl.md), or restart every allocation without -stale-only",
			j.JobID, j.Namespace)
	}
	o.job, o.client.namespace = j.JobID, j.Namespace
	o.spec.OnlyAllocs = make([]string, 0, len(j.Allocs))
	for _, s := range j.Allocs {
		o.spec.OnlyAllocs = append(o.spec.OnlyAllocs, s.ID)
	}
	if len(j.Allocs) == 0 || o.json {
		return nil
	}
	p.Header(a.now(), fmt.Sprintf("Found %s of job %q running with templates re-rendered after their tasks started",
		output.Plural(len(j.Allocs), "allocation", "allocations"), j.JobID))
	if o.verbose {
		for _, s := range j.Allocs {
			var refs []string
			for _, t := range s.Templates {
				refs = append(refs, fmt.Sprintf("%s/%s re-rendered at %s", t.Task, t.Destination, output.FormatTime(t.RenderedAt)))
			}
			p.Detail(a.now(), fmt.Sprintf("Allocation %q: %s", output.ShortID(s.ID, true), strings.Join(refs, ", ")))
		}
	}
	return nil
}
