package changereport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Words of the listing for what is not an index: stable, users grep for them.
const (
	NoneNomad   = "none (missing, or not listable by this token)"
	NoneConsul  = "none (missing, or not readable by this Consul token)"
	NoConsul    = "unknown (no Consul configured)"
	NoneRollout = "none"
)

// WatchedJob is one job of `watches -json` and `watches -explain -json`: the explanation
// (its fields inline, as before) with the facts read from Nomad, Consul and the store.
type WatchedJob struct {
	onchange.Explain
	// Sources are the distinct sources the job's groups watch (or would watch), each with
	// its last change.
	Sources []sourceFact
	// LastRollout is the job's newest config-change rollout; null when there is none, or
	// when it could not be read (then LastRolloutNote says why).
	LastRollout     *rolloutFact
	LastRolloutNote string `json:",omitempty"`
	// FileAccess says whether this command's token may read the allocations' files, which
	// following templates by their file needs (the namespace's read-fs capability),
	// checked on one running allocation: "readable", "denied" or "unknown"
	// (FileAccessNote says why); absent when no group follows a template by its file.
	FileAccess     string `json:",omitempty"`
	FileAccessNote string `json:",omitempty"`
}

// The values of WatchedJob.FileAccess.
const (
	filesReadable = "readable"
	filesDenied   = "denied"
	filesUnknown  = "unknown"
)

// sourceFact is a source and its last change; Note says why LastChange is null.
type sourceFact struct {
	Source     onchange.Source
	LastChange *changeFact
	Note       string `json:",omitempty"`
}

// changeFact is the newest change of what a source covers: Nomad's ModifyIndex and
// ModifyTime of the newest variable, or a Consul key's ModifyIndex (Time null: Consul
// keeps no time).
type changeFact struct {
	Index uint64
	Time  *time.Time
}

// rolloutFact names a restart record: its full ID and status.
type rolloutFact struct {
	ID     string
	Status restart.Status
}

// Facts reads the facts of the listing. It only reads: the sources through
// sourcewatch, as the agent does (the variables' metadata listing, never a variable, so no
// read capability on secrets is needed; Consul keys), and the restart records.
type Facts struct {
	// Sources reads the sources once, as the agent watches them.
	Sources SourceReader
	// Stores are where the restart records are read (the stores `status` reads).
	Stores []store.Store
	// Files reads allocations and their files, to check that templates followed by
	// their file can be read; nil: not checked.
	Files JobFiles
}

// SourceReader reads the current state of config-change sources once (*sourcewatch.Hub).
type SourceReader interface {
	Read(ctx context.Context, sources []onchange.Source) map[onchange.Source]sourcewatch.State
}

// Jobs reads the facts of explained jobs: their sources in one read (a source several
// jobs share is read once), and each job's last rollout.
func (f Facts) Jobs(ctx context.Context, explained []onchange.Explain) []WatchedJob {
	sources := make([][]onchange.Source, len(explained))
	var all []onchange.Source
	for i, e := range explained {
		sources[i] = distinctSources(e)
		all = append(all, sources[i]...)
	}
	states := f.Sources.Read(ctx, all)
	out := make([]WatchedJob, 0, len(explained))
	for i, e := range explained {
		j := WatchedJob{Explain: e, Sources: make([]sourceFact, 0, len(sources[i]))}
		for _, src := range sources[i] {
			j.Sources = append(j.Sources, newSourceFact(src, states[src]))
		}
		j.LastRollout, j.LastRolloutNote = f.lastRollout(ctx, e.Namespace, e.JobID)
		j.FileAccess, j.FileAccessNote = f.fileAccess(ctx, e)
		out = append(out, j)
	}
	return out
}

// distinctSources are the sources of every group of e, in order, each once.
func distinctSources(e onchange.Explain) []onchange.Source {
	var out []onchange.Source
	seen := map[onchange.Source]bool{}
	for _, g := range e.Groups {
		for _, w := range g.Watched {
			if !seen[w.Source] {
				seen[w.Source] = true
				out = append(out, w.Source)
			}
		}
	}
	return out
}

// newSourceFact is src's last change as st shows it, or the note that says why there is
// none. Nomad leaves out of a listing what the token may not list, so a missing variable
// and a hidden one read alike.
func newSourceFact(src onchange.Source, st sourcewatch.State) sourceFact {
	fact := sourceFact{Source: src}
	switch {
	case st.Err != nil:
		fact.Note = sourceNote(src, st.Err)
	case st.Count == 0 && src.Kind.Nomad():
		fact.Note = NoneNomad
	case st.Count == 0:
		fact.Note = NoneConsul
	default:
		fact.LastChange = &changeFact{Index: st.Index}
		if !st.ChangedAt.IsZero() { // Consul keeps no time
			at := st.ChangedAt.UTC()
			fact.LastChange.Time = &at
		}
	}
	return fact
}

// sourceNote words why a source could not be read; a denial names the ACL rule to grant.
func sourceNote(src onchange.Source, err error) string {
	var denied *sourcewatch.DeniedError
	switch {
	case errors.As(err, &denied) && src.Kind.Nomad():
		// A 403 refuses the token itself: Nomad filters what a valid token may not list.
		return fmt.Sprintf("unknown (Nomad refused the listing: check the token; it needs %s)", denied.Rule())
	case errors.As(err, &denied):
		return fmt.Sprintf("unknown (Consul denied the read: grant the Consul token %s)", denied.Rule())
	case errors.Is(err, sourcewatch.ErrNoConsul):
		return NoConsul
	case src.Kind.Nomad():
		return fmt.Sprintf("unknown (listing variables under %q: %s)", src.Path, output.OneLine(err.Error()))
	}
	return fmt.Sprintf("unknown (reading Consul: %s; check -consul-address or CONSUL_HTTP_ADDR)", output.OneLine(err.Error()))
}

// lastRollout is the newest record of the job that config-change triggers started, over
// the stores `status` reads. A store that cannot be read makes the answer unknown rather
// than "none", which would be a guess.
func (f Facts) lastRollout(ctx context.Context, namespace, job string) (*rolloutFact, string) {
	var newest *restart.Record
	for _, st := range f.Stores {
		recs, err := st.List(ctx, store.Filter{Namespace: namespace, JobID: job})
		if err != nil {
			return nil, fmt.Sprintf("unknown (listing restarts in the %s store: %s)", st.Kind(), output.OneLine(err.Error()))
		}
		if r := newestTriggered(recs); r != nil && (newest == nil || r.CreateTime.After(newest.CreateTime)) {
			newest = r
		}
	}
	if newest == nil {
		return nil, ""
	}
	return &rolloutFact{ID: newest.ID, Status: newest.Status}, ""
}

// newestTriggered is the newest record (by CreateTime) that carries triggers: config-change
// rollouts do, an operator's restart does not.
func newestTriggered(recs []*restart.Record) *restart.Record {
	var newest *restart.Record
	for _, r := range recs {
		if len(r.Triggers) > 0 && (newest == nil || r.CreateTime.After(newest.CreateTime)) {
			newest = r
		}
	}
	return newest
}

// changeText is a source's last change in a table cell.
func changeText(f sourceFact) string {
	switch {
	case f.LastChange == nil:
		return f.Note
	case f.LastChange.Time == nil:
		return fmt.Sprintf("index %d", f.LastChange.Index)
	}
	return fmt.Sprintf("index %d at %s", f.LastChange.Index, output.FormatTime(*f.LastChange.Time))
}

// rolloutText is the job's last rollout in a table cell: short ID and status.
func (j WatchedJob) rolloutText() string {
	switch {
	case j.LastRollout != nil:
		return fmt.Sprintf("%s (%s)", output.ShortID(j.LastRollout.ID, false), j.LastRollout.Status)
	case j.LastRolloutNote != "":
		return j.LastRolloutNote
	}
	return NoneRollout
}

// sourceFactOf finds src's fact among the job's.
func (j WatchedJob) sourceFactOf(src onchange.Source) (sourceFact, bool) {
	for _, f := range j.Sources {
		if f.Source == src {
			return f, true
		}
	}
	return sourceFact{}, false
}

// fileAccess tries once to read the files of the templates followed by their file in one
// running allocation of the job: a token without read-fs is then shown here, rather than
// found when re-renders are silently not seen. The agent reads with its own token, which
// needs the capability as well.
func (f Facts) fileAccess(ctx context.Context, e onchange.Explain) (string, string) {
	paths := map[string][]string{}
	for _, g := range e.Groups {
		if p := onchange.FilePaths(g.Followed); len(p) > 0 {
			paths[g.Name] = p
		}
	}
	if len(paths) == 0 || f.Files == nil {
		return "", ""
	}
	allocs, _, err := f.Files.JobAllocations(ctx, e.Namespace, e.JobID)
	if err != nil {
		return filesUnknown, fmt.Sprintf("listing the job's allocations: %s", output.OneLine(err.Error()))
	}
	for _, a := range allocs {
		p := paths[a.Group]
		if len(p) == 0 || a.ClientStatus != restart.ClientRunning || a.DesiredStatus != restart.DesiredRun {
			continue
		}
		_, err := f.Files.FileTimes(ctx, a.ID, p)
		switch {
		case err == nil:
			return filesReadable, ""
		case errors.Is(err, cluster.ErrPermissionDenied):
			return filesDenied, fmt.Sprintf("this token may not read allocation files in namespace %q: grant the read-fs capability there, to this token and the agent's (see docs/acl.md)", e.Namespace)
		case errors.Is(err, cluster.ErrAllocNotFound):
			continue // gone since the listing: try the next one
		}
		return filesUnknown, fmt.Sprintf("reading the files of allocation %s: %s", output.ShortID(a.ID, false), output.OneLine(err.Error()))
	}
	return filesUnknown, "no running allocation to read"
}

// fileAccessText is the job's file access in a line of -explain.
func (j WatchedJob) fileAccessText() string {
	switch j.FileAccess {
	case filesReadable:
		return "readable by this token (the agent's token needs the read-fs capability too)"
	case filesDenied:
		return "not readable: " + j.FileAccessNote
	}
	return "unknown (" + j.FileAccessNote + ")"
}
