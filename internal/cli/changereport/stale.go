package changereport

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

// StaleSpecs reads the specifications of the named jobs (IDs or unique prefixes, resolved
// as run resolves them), or of every job of namespace ("*": of every namespace the token
// may list) that has a template. A job gone between the list and its read is skipped.
func StaleSpecs(ctx context.Context, nomad *cluster.Nomad, namespace string, jobs []string) ([]onchange.JobSpec, error) {
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
			job, err := ResolveJob(ctx, nomad, namespace, prefix)
			if err != nil {
				return nil, err
			}
			add(job.OnChange())
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
		job := Job{Spec: spec, Namespace: ref.Namespace}.OnChange()
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

// StaleJob is one job of `stale -json` (docs/schemas/stale.schema.json).
type StaleJob struct {
	Namespace string
	JobID     string
	// Allocs are its running allocations with a template re-rendered after their tasks
	// started, in Nomad's order (newest first); empty when none.
	Allocs []StaleAlloc
	// NotFollowed are its templates whose re-renders cannot be seen, and why.
	NotFollowed []NotFollowed
	// FilesDenied says the token may not read the allocations' files (the namespace's
	// read-fs capability): the templates followed by their file were not checked.
	FilesDenied bool

	// followed counts its templates followed by their renders; filesRead says some
	// allocation's files were read.
	followed  int
	filesRead bool
}

func (j StaleJob) hasFollowed() bool { return j.followed > 0 }

// StaleAlloc is a stale allocation: its templates re-rendered after their tasks
// started, since when (the oldest of those renders) and for how long until the reading.
type StaleAlloc struct {
	ID         string
	Name       string
	Group      string
	Templates  []StaleTemplate
	StaleSince time.Time
	StaleFor   time.Duration
}

// StaleTemplate is one template re-rendered after its task last started.
type StaleTemplate struct {
	Task          string
	Destination   string
	By            onchange.FollowBy
	RenderedAt    time.Time
	TaskStartedAt time.Time
}

// NotFollowed is a template whose re-renders cannot be seen.
type NotFollowed struct {
	Group       string
	Task        string
	Template    int
	Destination string
	Reason      string
}

// JobFiles is what stale reads of Nomad (*cluster.Nomad).
type JobFiles interface {
	JobAllocations(ctx context.Context, namespace, jobID string) ([]*restart.Alloc, uint64, error)
	cluster.FileReader
}

// staleFileReads bounds the directory listings in flight at once, as the agent's
// MaxFileReads does: each is forwarded by a server to the allocation's client.
const staleFileReads = 4

// ReadStaleJobs reads each job in turn (ReadStale).
func ReadStaleJobs(ctx context.Context, c JobFiles, jobs []onchange.JobSpec, now time.Time) ([]StaleJob, error) {
	out := make([]StaleJob, 0, len(jobs))
	for _, job := range jobs {
		j, err := ReadStale(ctx, c, job, now)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// ReadStale finds the job's stale allocations: every template as "rendered" follows it
// (onchange.AllTemplates: whatever the job's meta says), the job's allocations, and the
// modification times of the files of templates followed by their file in each running
// allocation. A denial of the files is reported in FilesDenied, not as an error: the
// templates followed by their task events are still judged.
func ReadStale(ctx context.Context, c JobFiles, job onchange.JobSpec, now time.Time) (StaleJob, error) {
	out := StaleJob{Namespace: NamespaceName(job.Namespace), JobID: job.ID, Allocs: []StaleAlloc{}, NotFollowed: []NotFollowed{}}
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
			out.NotFollowed = append(out.NotFollowed, NotFollowed{Group: g.Name, Task: n.Task, Template: n.Template, Destination: n.Destination, Reason: n.Reason})
		}
	}
	out.followed = len(followed)
	if len(followed) == 0 {
		return out, nil
	}
	allocs, _, err := c.JobAllocations(ctx, out.Namespace, job.ID)
	if err != nil {
		return StaleJob{}, jobLookupError(job.ID, out.Namespace, err)
	}
	read := cluster.ReadFileTimes(ctx, c, allocs, paths, make(chan struct{}, staleFileReads))
	if err := ctx.Err(); err != nil {
		return StaleJob{}, err
	}
	if err := firstFileFailure(read); err != nil && !read.Denied {
		return StaleJob{}, fmt.Errorf("reading the template files of job %q: %s; check that the allocations' clients are connected (nomad node status), then try again", job.ID, output.OneLine(err.Error()))
	}
	out.FilesDenied = read.Denied
	out.filesRead = len(read.Times) > 0
	for _, s := range onchange.FindStale(followed, read.Times, allocs) {
		out.Allocs = append(out.Allocs, newStaleAlloc(s, now))
	}
	return out, nil
}

func newStaleAlloc(s onchange.StaleAlloc, now time.Time) StaleAlloc {
	a := StaleAlloc{ID: s.Alloc.ID, Name: s.Alloc.Name, Group: s.Alloc.Group, StaleSince: s.Since().UTC(), StaleFor: max(now.Sub(s.Since()), 0)}
	for _, t := range s.Templates {
		a.Templates = append(a.Templates, StaleTemplate{Task: t.Task, Destination: t.Destination, By: t.By, RenderedAt: t.RenderedAt.UTC(), TaskStartedAt: t.StartedAt.UTC()})
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

// AllFilesDenied is the one-line refusal of a reading whose every file read was denied: a
// listing that silently left out every change_mode noop template would say "nothing is
// stale" on no evidence. When some job's files were read, the denied ones are warned about
// instead.
func AllFilesDenied(list []StaleJob) error {
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

// FilesDeniedText says that a job's files could not be read, and what that leaves out.
func FilesDeniedText(j StaleJob) string {
	return fmt.Sprintf("job %q: the token may not read allocation files in namespace %q (the read-fs capability), so its templates with change_mode noop were not checked", j.JobID, j.Namespace)
}

func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
