package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// SourceWatcher follows the sources a job's templates read (a *sourcewatch.Hub).
type SourceWatcher interface {
	Watch(ctx context.Context, src onchange.Source) <-chan sourcewatch.State
}

// ChangeRollouts turns on config-change rollouts: the agent follows the jobs in its scope
// and files a restart of the groups that opt in (nomad-restart.on-change) when the sources
// their templates read change (onchange.Decide says when and which allocations). The
// restarts it files are ordinary detached restarts, driven like any other.
type ChangeRollouts struct {
	Sources SourceWatcher
	// BusyRecheck is how long a rollout refused by a deployment in progress waits before
	// it is decided again; default 30s.
	BusyRecheck time.Duration
	// Files reads the allocations' template files, to follow the re-renders of templates
	// with change_mode noop; nil: only the re-renders that leave task events (signal,
	// script) are followed.
	Files cluster.FileReader
	// MaxFileReads bounds the directory listings in flight at once, across jobs;
	// default 4.
	MaxFileReads int
	// Values reads, keeps and writes back the values of the sources of jobs that revert
	// failed rollouts (nomad-restart.on-failure = "revert"); nil: failed rollouts stop.
	Values SourceValues
}

// changeRunner runs ChangeRollouts: one blocking list of the jobs, and one follower per
// job that opts in, restarted when the job's specification changes.
type changeRunner struct {
	a       *Agent
	cfg     ChangeRollouts
	log     *slog.Logger
	metrics *changeMetrics

	// fileReads holds a slot per directory listing in flight (ChangeRollouts.MaxFileReads).
	fileReads chan struct{}

	// analyzed holds, by namespace/job, the JobModifyIndex of the specification last
	// analyzed, rolled or not: a job is read and analyzed again only when its
	// specification changes, not at every change of the job list (which moves with every
	// allocation's). notices holds, by namespace/job, what was logged of that analysis
	// (noticeSet). Both are the list's goroutine's alone (sync and what it calls).
	analyzed map[string]uint64
	notices  map[string]noticeSet
	// unreadable holds, by namespace/job, why its specification could not be read: the
	// read is tried again at each change of the job list, and warned about only when the
	// reason changes (the list's goroutine's alone, as analyzed).
	unreadable map[string]string

	mu        sync.Mutex
	followers map[string]*jobFollower // by namespace/job
	// carried holds, by namespace/job, the triggers of a rollout that a newer change
	// waited for: the rollout that follows lists them before its own.
	carried map[string][]restart.Trigger
	// outcomes holds the rollouts (and reverts) whose end a follower awaits, to revert or
	// forget kept values (change_revert.go): one wait per restart.
	outcomes map[string]bool
}

// jobFollower is the follow of one opted-in job at one version of its specification.
type jobFollower struct {
	cancel context.CancelFunc
}

func (a *Agent) startChangeRunner(ctx context.Context) {
	if a.cfg.Changes == nil || a.cfg.Jobs == nil {
		return
	}
	c := &changeRunner{a: a, cfg: *a.cfg.Changes, log: a.log.With("component", "config-change"),
		metrics: a.metrics.changeMetrics(), followers: map[string]*jobFollower{}, carried: map[string][]restart.Trigger{},
		analyzed: map[string]uint64{}, notices: map[string]noticeSet{}, unreadable: map[string]string{}, outcomes: map[string]bool{}}
	if c.cfg.BusyRecheck <= 0 {
		c.cfg.BusyRecheck = 30 * time.Second
	}
	if c.cfg.MaxFileReads <= 0 {
		c.cfg.MaxFileReads = 4
	}
	c.fileReads = make(chan struct{}, c.cfg.MaxFileReads)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c.run(ctx)
	}()
}

// run follows the job list with blocking queries and keeps one follower per opted-in job.
func (c *changeRunner) run(ctx context.Context) {
	defer c.stopAll()
	// Paced: the job list's index moves with every allocation's change on a busy cluster,
	// and each answer lists every job.
	w := &cluster.Watch{What: "listing jobs for config-change rollouts", Log: c.log,
		Policy: cluster.RetryPolicy{Initial: time.Second, Max: time.Minute}, MinGap: c.a.cfg.MinListGap}
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		stubs, next, err := c.a.cfg.Jobs.WatchJobs(ctx, c.a.cfg.Namespace, index, 5*time.Minute)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err != nil {
			return 0, err
		}
		c.sync(ctx, stubs)
		return next, nil
	})
}

// sync starts a follower for each job whose specification changed since its follower
// started (or that has none), and stops those of jobs gone.
func (c *changeRunner) sync(ctx context.Context, stubs []cluster.JobStub) {
	seen := map[string]bool{}
	for _, st := range stubs {
		if st.ParentID != "" || st.Stop {
			continue // a periodic or dispatched child, or a stopped job: nothing to roll
		}
		k := st.Namespace + "/" + st.ID
		seen[k] = true
		if idx, ok := c.analyzed[k]; ok && idx == st.JobModifyIndex {
			continue
		}
		c.restartFollower(ctx, k, st)
	}
	for k := range c.analyzed {
		if !seen[k] {
			delete(c.analyzed, k)
			c.setNotices(k, nil, nil) // the job is gone or stopped: so are its problems
		}
	}
	for k := range c.unreadable {
		if !seen[k] {
			delete(c.unreadable, k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, f := range c.followers {
		if !seen[k] {
			f.cancel()
			delete(c.followers, k)
		}
	}
	c.metrics.jobs.Set(float64(len(c.followers)))
}

// restartFollower reads the job's specification and follows it if a group opts in.
func (c *changeRunner) restartFollower(ctx context.Context, k string, st cluster.JobStub) {
	c.mu.Lock()
	if f := c.followers[k]; f != nil {
		f.cancel()
		delete(c.followers, k)
	}
	c.mu.Unlock()
	spec, err := c.a.cfg.Cluster.JobSpec(ctx, st.Namespace, st.ID)
	if err != nil {
		// Tried again at the next change of the list; said again only if the reason changes.
		if why := err.Error(); c.unreadable[k] != why {
			c.unreadable[k] = why
			c.log.Warn("reading a job's specification for config-change rollouts", "job", st.ID, "namespace", st.Namespace, "err", err)
		}
		return
	}
	if _, ok := c.unreadable[k]; ok {
		delete(c.unreadable, k)
		c.log.Info("a job's specification can be read again for config-change rollouts", "job", st.ID, "namespace", st.Namespace)
	}
	ex := onchange.Analyze(*spec)
	c.analyzed[k] = st.JobModifyIndex
	now := noticeSet{}
	rolls := false
	for _, g := range ex.Groups {
		for _, p := range g.Problems {
			now.add(notice{kind: noticeMeta, slot: p.Level + " " + p.Key, text: p.String()}, g.Name)
		}
		if g.OptedIn() {
			for _, w := range g.Warnings {
				now.add(notice{kind: noticeChangeMode, text: w}, g.Name)
			}
			for _, n := range g.NotFollowed {
				now.add(notice{kind: noticeNotFollowed, text: n.String()}, g.Name)
			}
		}
		rolls = rolls || g.Rolls()
	}
	c.setNotices(k, &st, now)
	if !rolls {
		return
	}
	fctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.followers[k] = &jobFollower{cancel: cancel}
	c.mu.Unlock()
	c.log.Info("following a job for config-change rollouts", "job", st.ID, "namespace", st.Namespace)
	c.a.wg.Add(1)
	go func() {
		defer c.a.wg.Done()
		c.follow(fctx, ex)
	}()
}

// notice is a problem of a job's specification that the agent logs: once when it appears
// (or its text changes), not at every analysis of the job.
type notice struct {
	kind string
	// slot is where a meta problem is (its level and key): a problem whose value or reason
	// changed is a new notice in the same slot, and a slot left empty is a fix.
	slot string
	text string
}

// The kinds of notices.
const (
	noticeMeta        = "invalid_meta"
	noticeChangeMode  = "change_mode"
	noticeNotFollowed = "not_followed"
)

// noticeSet is what an analysis of a job found, with the groups each notice concerns.
type noticeSet map[notice][]string

func (s noticeSet) add(n notice, group string) { s[n] = append(s[n], group) }

// setNotices records what the job's latest analysis found (nil: the job is no longer
// listed), logs the notices that are new since the one before and the meta problems fixed
// since, and sets the gauge of meta problems.
func (c *changeRunner) setNotices(k string, st *cluster.JobStub, now noticeSet) {
	before := c.notices[k]
	filled := map[string]bool{}
	for _, n := range sortedNotices(now) {
		filled[n.slot] = true
		if _, ok := before[n]; ok {
			continue
		}
		attrs := []any{"job", st.ID, "namespace", st.Namespace, "groups", strings.Join(now[n], ",")}
		switch n.kind {
		case noticeMeta:
			c.log.Warn("invalid nomad-restart meta: the group is not rolled until it is fixed", append(attrs, "problem", n.text)...)
			c.metrics.warnings.WithLabelValues("invalid_meta").Inc()
		case noticeChangeMode:
			c.log.Warn("config-change rollouts", append(attrs, "warning", n.text)...)
			c.metrics.warnings.WithLabelValues("change_mode").Inc()
		case noticeNotFollowed:
			c.log.Warn("a template's re-renders are not followed", append(attrs, "template", n.text)...)
		}
	}
	if st != nil {
		for _, n := range sortedNotices(before) {
			if n.kind == noticeMeta && !filled[n.slot] {
				c.log.Info("nomad-restart meta fixed", "job", st.ID, "namespace", st.Namespace, "was", n.text)
			}
		}
	}
	if len(now) == 0 {
		delete(c.notices, k)
	} else {
		c.notices[k] = now
	}
	problems := 0
	for _, set := range c.notices {
		for n := range set {
			if n.kind == noticeMeta {
				problems++
			}
		}
	}
	c.metrics.metaProblems.Set(float64(problems))
}

// sortedNotices lists a set's notices in a fixed order, so that the log is the same from
// one run to the next.
func sortedNotices(s noticeSet) []notice {
	out := make([]notice, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b notice) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.slot, b.slot), cmp.Compare(a.text, b.text))
	})
	return out
}

func (c *changeRunner) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, f := range c.followers {
		f.cancel()
		delete(c.followers, k)
	}
}

// sourceUpdate is one source's new state, for a job's follower.
type sourceUpdate struct {
	src   onchange.Source
	state sourcewatch.State
}

// follow decides, at each change of the job's sources and when a debounce ends, whether the
// job needs a rollout (onchange.Decide), and files it.
func (c *changeRunner) follow(ctx context.Context, ex onchange.Explain) {
	updates := make(chan sourceUpdate)
	for _, src := range rollingSources(ex) {
		ch := c.cfg.Sources.Watch(ctx, src)
		go func() {
			for st := range ch {
				select {
				case updates <- sourceUpdate{src, st}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	states := map[onchange.Source]onchange.SourceState{}
	// held is the last value read of each source whose change may be reverted.
	held := map[onchange.Source]onchange.SourceValue{}
	reverting := revertSources(ex)
	c.resumeReverts(ctx, ex)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// Re-renders are followed by reading the allocations (their task events) and the
	// followed templates' files every render-interval, the first time at once.
	rf := &renderFollow{interval: renderInterval(ex)}
	var tick <-chan time.Time
	if rf.interval > 0 {
		ticker := time.NewTicker(rf.interval)
		defer ticker.Stop()
		tick = ticker.C
		rf.due = true
	}
	for {
		if !rf.due {
			select {
			case <-ctx.Done():
				return
			case u := <-updates:
				if !c.take(ex, states, u) {
					continue
				}
				if reverting[u.src] && c.cfg.Values != nil {
					c.keep(ctx, ex, held, u.src, states[u.src])
				}
			case <-timer.C:
			case <-tick:
				rf.due = true
			}
		}
		if wait := c.decide(ctx, ex, states, rf); wait > 0 {
			timer.Reset(wait)
		}
	}
}

// renderFollow is a job follower's state for re-renders: when to read the files again,
// and what they showed last.
type renderFollow struct {
	interval time.Duration
	// due says the files are to be read at the next decision.
	due     bool
	renders onchange.Renders
	// denied says the last read was refused for the token (logged once a streak).
	denied bool
}

// renderInterval is the shortest render-interval of the job's groups that roll on
// re-renders, 0 when none does.
func renderInterval(ex onchange.Explain) time.Duration {
	var d time.Duration
	for _, g := range ex.Groups {
		if g.RollsOnRenders() && (d == 0 || g.RenderInterval < d) {
			d = g.RenderInterval
		}
	}
	return d
}

// take records a source's new state; false when there is nothing to decide on (the source
// cannot be read, which is logged and counted).
func (c *changeRunner) take(ex onchange.Explain, states map[onchange.Source]onchange.SourceState, u sourceUpdate) bool {
	if u.state.Err != nil {
		c.log.Warn("a watched source cannot be read: the job is not rolled on its changes", "job", ex.JobID, "source", u.src.String(), "err", u.state.Err)
		c.metrics.warnings.WithLabelValues("source_unreadable").Inc()
		return false
	}
	if u.state.Count == 0 && u.src.Kind == onchange.NomadVariable {
		// Nomad leaves out of a listing what the token may not list: a missing variable
		// and an unlistable one look alike.
		c.log.Warn("a watched variable is missing, or the agent's token may not list it (variables \"list\" on its path)", "job", ex.JobID, "source", u.src.String())
		c.metrics.warnings.WithLabelValues("source_missing").Inc()
	}
	prev := states[u.src]
	states[u.src] = onchange.SourceState{Index: u.state.Index, Count: u.state.Count, ChangedAt: u.state.ChangedAt, PrevIndex: prevIndex(prev, u.state.Index)}
	return true
}

// prevIndex is the index a source had before it moved to index: the one seen last, or
// the one before that when the state came again without a move.
func prevIndex(prev onchange.SourceState, index uint64) uint64 {
	if prev.Index != index {
		return prev.Index
	}
	return prev.PrevIndex
}

// rollingSources are the distinct sources of the job's groups that roll.
func rollingSources(ex onchange.Explain) []onchange.Source {
	seen := map[onchange.Source]bool{}
	var out []onchange.Source
	for _, g := range ex.Groups {
		if !g.Rolls() {
			continue
		}
		for _, w := range g.Watched {
			if !seen[w.Source] {
				seen[w.Source] = true
				out = append(out, w.Source)
			}
		}
	}
	return out
}

// decide reads the job's allocations (and, when due, the followed templates' files),
// decides on the sources' changes first, then on re-renders, and files; it returns when to
// decide again (0: at the next change or render tick).
func (c *changeRunner) decide(ctx context.Context, ex onchange.Explain, states map[onchange.Source]onchange.SourceState, rf *renderFollow) time.Duration {
	allocs, _, err := c.a.cfg.Cluster.JobAllocations(ctx, ex.Namespace, ex.JobID)
	if err != nil {
		c.log.Warn("reading a job's allocations for config-change rollouts", "job", ex.JobID, "err", err)
		return c.cfg.BusyRecheck
	}
	if rf.due {
		rf.due = false
		rf.renders = c.readRenders(ctx, ex, allocs, rf)
	}
	now := c.a.cfg.Now()
	d := onchange.Decide(ex, states, allocs, now)
	if d.Rollout == nil && rf.interval > 0 {
		dr := onchange.DecideRendered(ex, rf.renders, allocs, now)
		d.Rollout = dr.Rollout
		if d.RecheckAt.IsZero() || !dr.RecheckAt.IsZero() && dr.RecheckAt.Before(d.RecheckAt) {
			d.RecheckAt = dr.RecheckAt
		}
	}
	if d.Rollout == nil {
		if d.RecheckAt.IsZero() {
			return 0
		}
		return max(d.RecheckAt.Sub(now), time.Millisecond)
	}
	underWay, err := c.revertUnderWay(ctx, ex, d.Rollout)
	switch {
	case err != nil:
		c.log.Warn("reading the value kept for a revert, to tell its write-back from a change: deciding again later", "job", ex.JobID, "err", err)
		return c.cfg.BusyRecheck
	case underWay:
		return 0
	}
	return c.file(ctx, ex, d.Rollout)
}

// readRenders reads, for each running allocation of the groups that roll on re-renders,
// the modification times of the followed templates' files (cluster.ReadFileTimes, at most
// MaxFileReads in flight across jobs). An allocation whose files cannot be read has no
// entry: nothing is restarted on a guess.
func (c *changeRunner) readRenders(ctx context.Context, ex onchange.Explain, allocs []*restart.Alloc, rf *renderFollow) onchange.Renders {
	if c.cfg.Files == nil {
		return nil
	}
	paths := map[string][]string{} // by group
	for _, g := range ex.Groups {
		if g.RollsOnRenders() {
			paths[g.Name] = onchange.FilePaths(g.Followed)
		}
	}
	read := cluster.ReadFileTimes(ctx, c.cfg.Files, allocs, paths, c.fileReads)
	c.metrics.renderReads.WithLabelValues("ok").Add(float64(len(read.Times)))
	for id, err := range read.Failed {
		if errors.Is(err, cluster.ErrPermissionDenied) {
			c.metrics.renderReads.WithLabelValues("denied").Inc()
			continue
		}
		c.metrics.renderReads.WithLabelValues("error").Inc()
		c.metrics.warnings.WithLabelValues("files_unreadable").Inc()
		c.log.Warn("reading an allocation's template files: its re-renders are not followed until a read works", "job", ex.JobID, "alloc", id, "err", err)
	}
	if read.Denied && !rf.denied {
		c.log.Warn("the agent's token may not read the allocations' files (the namespace's read-fs capability): re-renders of change_mode noop templates are not followed", "job", ex.JobID, "namespace", ex.Namespace)
		c.metrics.warnings.WithLabelValues("read_fs_denied").Inc()
	}
	rf.denied = read.Denied
	return read.Times
}

// file plans and records the rollout (detached: the agents drive it); it returns when to
// decide again when the job could not be rolled now.
func (c *changeRunner) file(ctx context.Context, ex onchange.Explain, r *onchange.Rollout) time.Duration {
	plan, err := c.a.eng.Plan(ctx, engine.Request{Namespace: ex.Namespace, Job: ex.JobID, Spec: r.Spec})
	var dep *engine.DeploymentError
	switch {
	case errors.As(err, &dep):
		c.log.Info("config change: the job's deployment is in progress; rolling after it", "job", ex.JobID, "deployment", dep.ID)
		c.metrics.rollouts.WithLabelValues("waiting").Inc()
		return c.cfg.BusyRecheck
	case err != nil:
		c.log.Warn("planning a config-change rollout", "job", ex.JobID, "err", err)
		c.metrics.rollouts.WithLabelValues("failed").Inc()
		return c.cfg.BusyRecheck
	}
	rec := plan.Record
	if len(rec.Allocs) == 0 {
		return 0 // every allocation started since the change
	}
	rec.ID, rec.Triggers = r.ID, append(c.superseded(ex), r.Triggers...)
	cause := "a change of " + triggerSources(r.Triggers)
	if len(r.Spec.OnlyAllocs) > 0 {
		cause = "re-renders of " + triggerSources(r.Triggers)
	}
	rec.AppendEvent(restart.Event{Time: c.a.cfg.Now(), Type: restart.EventCreated,
		Message: fmt.Sprintf("Restart of job %q created by %s: %d allocation(s) in %d batch(es)",
			rec.JobID, cause, len(rec.Allocs), rec.Batches)})
	for _, note := range onchange.RevertNotes(ex, r.Groups, r.Triggers) {
		rec.AppendEvent(restart.Event{Time: c.a.cfg.Now(), Type: restart.EventWarning, Message: note})
	}
	err = c.a.eng.Create(ctx, rec)
	var busy *store.JobBusyError
	switch {
	case err == nil:
		// Any agent's discovery finds it, pending and undriven; this one offers it to its
		// own dispatch at once rather than at its next listing.
		c.log.Info("config-change rollout filed", "job", ex.JobID, "restart", rec.ID, "allocs", len(rec.Allocs), "groups", r.Groups)
		c.metrics.rollouts.WithLabelValues("filed").Inc()
		c.a.offerFiled(rec.Namespace, rec.ID, rec.ModifyIndex)
		c.noteRolledBy(ctx, ex, rec.ID, r.Triggers)
		c.followOutcome(ctx, ex, rec.Namespace, rec.ID)
		return 0
	case errors.Is(err, store.ErrExists):
		c.metrics.rollouts.WithLabelValues("exists").Inc()
		c.noteRolledBy(ctx, ex, rec.ID, r.Triggers)
		c.followOutcome(ctx, ex, rec.Namespace, rec.ID)
		return 0 // filed already, by this agent or another: once per change
	case errors.As(err, &busy):
		c.log.Info("config change: the job has a restart in progress; rolling after it", "job", ex.JobID, "restart", busy.RestartID)
		c.metrics.rollouts.WithLabelValues("waiting").Inc()
		c.remember(ctx, ex, busy.Namespace, busy.RestartID)
		c.awaitEnd(ctx, busy.Namespace, busy.RestartID)
		return time.Millisecond
	}
	c.log.Warn("filing a config-change rollout", "job", ex.JobID, "err", err)
	c.metrics.rollouts.WithLabelValues("failed").Inc()
	return c.cfg.BusyRecheck
}

// remember keeps the triggers of restart id, in progress, for the rollout that follows it.
func (c *changeRunner) remember(ctx context.Context, ex onchange.Explain, ns, id string) {
	r, err := c.a.cfg.Store.Get(ctx, ns, id)
	if err != nil || len(r.Triggers) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.carried[ex.Namespace+"/"+ex.JobID] = r.Triggers
}

// superseded returns (once) the triggers remember kept for the job.
func (c *changeRunner) superseded(ex onchange.Explain) []restart.Trigger {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := ex.Namespace + "/" + ex.JobID
	out := c.carried[k]
	delete(c.carried, k)
	return out
}

// awaitEnd waits, with the store's blocking watch, until restart id has ended, and returns
// its record then (nil when it cannot be read, or ctx ended).
func (c *changeRunner) awaitEnd(ctx context.Context, ns, id string) *restart.Record {
	var after uint64
	for ctx.Err() == nil {
		r, err := c.a.cfg.Store.WatchHead(ctx, ns, id, after)
		if err != nil {
			return nil
		}
		if r.Status.Terminal() {
			return r
		}
		after = r.ModifyIndex
	}
	return nil
}

func triggerSources(ts []restart.Trigger) string {
	sources := make([]string, len(ts))
	for i, t := range ts {
		sources[i] = t.Source
	}
	return strings.Join(sources, ", ")
}
