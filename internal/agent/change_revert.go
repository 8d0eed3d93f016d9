package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// SourceValues reads and writes what the reverts of failed rollouts need (a
// *sourcewatch.Hub): the whole value of a variable or key, its write-back with
// check-and-set, and the value kept for each source. A check-and-set that finds a change
// is onchange.ErrChanged: someone wrote first.
type SourceValues interface {
	ReadValue(ctx context.Context, src onchange.Source) (onchange.SourceValue, error)
	WriteBack(ctx context.Context, src onchange.Source, v onchange.SourceValue, index uint64) (uint64, error)
	KeptPath(src onchange.Source) string
	ReadKept(ctx context.Context, ns string, src onchange.Source) (onchange.Kept, uint64, error)
	WriteKept(ctx context.Context, ns string, src onchange.Source, k onchange.Kept, index uint64) (uint64, error)
	DeleteKept(ctx context.Context, ns string, src onchange.Source, index uint64) error
}

// Reverts (nomad-restart.on-failure = "revert"), level-triggered so that any agent finishes
// what another began:
//   - keep: a follower reads the whole value of each source it may revert at every index it
//     sees; on a change it keeps the value replaced (sourcewatch's kept variable), unless a
//     revert under way protects the one kept.
//   - revert: when the change's rollout failed, the kept variable is marked reverting, the
//     value written back with check-and-set on the bad value's index (or found written
//     already, or found changed by someone: then nothing is written), marked reverted, and
//     a restart of the allocations that restarted onto the bad value filed under an ID
//     derived from the rollout's, so that one agent files it and the agents drive it.
//   - the write-back is a change like any other to the followers: a decision whose newest
//     change is a revert's write-back resumes that revert instead of rolling every
//     allocation.

// revertSources are the sources of ex's groups that revert their changes' failed rollouts.
func revertSources(ex onchange.Explain) map[onchange.Source]bool {
	out := map[onchange.Source]bool{}
	for _, g := range ex.Groups {
		for _, w := range g.Watched {
			if g.Reverts(w.Source) {
				out[w.Source] = true
			}
		}
	}
	return out
}

// keep reads src's value at its new state and, when it replaced one read before, keeps that
// one. held is the follower's last value read per source.
func (c *changeRunner) keep(ctx context.Context, ex onchange.Explain, held map[onchange.Source]onchange.SourceValue, src onchange.Source, st onchange.SourceState) {
	prev, had := held[src]
	if had && prev.Index == st.Index {
		return
	}
	cur, err := c.cfg.Values.ReadValue(ctx, src)
	if err != nil {
		delete(held, src) // a change seen next is not one whose previous value is known
		c.log.Warn("reading a watched source's value, to keep it for a revert: a change of it cannot be reverted until a read works", "job", ex.JobID, "source", src.String(), "err", err)
		c.metrics.warnings.WithLabelValues("keep_failed").Inc()
		return
	}
	held[src] = cur
	if !had || !prev.Exists() || prev.Index >= cur.Index {
		return // no change seen since a value was read
	}
	k, idx, err := c.cfg.Values.ReadKept(ctx, ex.Namespace, src)
	if err == nil {
		next, write := onchange.Keep(k, idx, src.String(), prev, cur)
		if !write {
			return
		}
		_, err = c.cfg.Values.WriteKept(ctx, ex.Namespace, src, next, idx)
	}
	switch {
	case errors.Is(err, onchange.ErrChanged):
		return // another agent kept it at the same moment
	case err != nil:
		c.log.Warn("keeping a watched source's previous value for a revert: its change cannot be reverted", "job", ex.JobID, "source", src.String(), "err", err)
		c.metrics.warnings.WithLabelValues("keep_failed").Inc()
		return
	}
	c.log.Info("kept the value a watched source's change replaced, for a revert if its rollout fails", "job", ex.JobID, "source", src.String(),
		"kept_at", c.cfg.Values.KeptPath(src), "new_index", cur.Index)
}

// revertUnderWay reports whether the rollout r decided answers a revert's write-back (the
// newest change of its sources is the kept value put back): the revert is resumed, or left
// to its restart, rather than every allocation rolled. A change of another source since is
// rolled as any other. An error says a kept value could not be read: whether r answers a
// write-back is not known, and r is not to be filed yet (rolling every allocation onto the
// value written back would restart the ones that never loaded the bad one).
func (c *changeRunner) revertUnderWay(ctx context.Context, ex onchange.Explain, r *onchange.Rollout) (bool, error) {
	if c.cfg.Values == nil {
		return false, nil
	}
	reverting := revertSources(ex)
	var newest time.Time
	for _, t := range r.Triggers {
		newest = maxTime(newest, t.ChangedAt)
	}
	for _, t := range r.Triggers {
		src, ok := sourceOf(reverting, t.Source)
		if !ok || t.ChangedAt.Before(newest) {
			continue
		}
		k, idx, err := c.cfg.Values.ReadKept(ctx, ex.Namespace, src)
		if err != nil {
			return false, err
		}
		if idx == 0 || k.Rollout == "" || k.Rollout == r.ID || t.NewIndex <= k.BadIndex {
			continue
		}
		if k.State == onchange.KeptReverted && t.NewIndex != k.WrittenIndex {
			continue // a change since the write-back: rolled as any other
		}
		if k.State == onchange.KeptReverted {
			if _, err := c.a.cfg.Store.Get(ctx, ex.Namespace, onchange.RevertID(k.Rollout)); err == nil {
				c.followOutcome(ctx, ex, ex.Namespace, onchange.RevertID(k.Rollout))
				return true, nil
			}
		}
		rec, err := c.a.cfg.Store.Get(ctx, ex.Namespace, k.Rollout)
		if err != nil {
			c.log.Warn("reading a failed rollout to finish its revert", "job", ex.JobID, "restart", k.Rollout, "err", err)
			return true, nil
		}
		c.startRevert(ctx, ex, rec)
		return true, nil
	}
	return false, nil
}

// once runs fn in the background unless a run of key is under way in this agent.
func (c *changeRunner) once(ctx context.Context, key string, fn func(context.Context)) {
	c.mu.Lock()
	if c.outcomes[key] {
		c.mu.Unlock()
		return
	}
	c.outcomes[key] = true
	c.mu.Unlock()
	c.a.wg.Add(1)
	go func() {
		defer c.a.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.outcomes, key)
			c.mu.Unlock()
		}()
		fn(ctx)
	}()
}

// noteRolledBy records, in the values kept for the changes rollout id answers, that it was
// filed: an agent that starts later resumes the revert from there (resumeReverts), whatever
// its own watch saw first (a Consul key's first answer carries no change).
func (c *changeRunner) noteRolledBy(ctx context.Context, ex onchange.Explain, id string, triggers []restart.Trigger) {
	if c.cfg.Values == nil {
		return
	}
	reverting := revertSources(ex)
	for _, t := range triggers {
		src, ok := sourceOf(reverting, t.Source)
		if !ok {
			continue
		}
		k, idx, err := c.cfg.Values.ReadKept(ctx, ex.Namespace, src)
		if err != nil || idx == 0 || k.State != onchange.KeptHeld || k.BadIndex != t.NewIndex || k.RolledBy == id {
			continue
		}
		k.RolledBy = id
		if _, err := c.cfg.Values.WriteKept(ctx, ex.Namespace, src, k, idx); err != nil && !errors.Is(err, onchange.ErrChanged) {
			c.log.Warn("noting the rollout of a kept value's change", "job", ex.JobID, "source", src.String(), "err", err)
		}
	}
}

// resumeReverts picks up, as a follower starts, what the kept values of the job's sources
// say is under way: a rollout filed for a change (its end is awaited, to revert it if it
// failed), or a revert begun (finished, or its restart followed).
func (c *changeRunner) resumeReverts(ctx context.Context, ex onchange.Explain) {
	if c.cfg.Values == nil {
		return
	}
	for src := range revertSources(ex) {
		k, idx, err := c.cfg.Values.ReadKept(ctx, ex.Namespace, src)
		switch {
		case err != nil || idx == 0:
		case k.State == onchange.KeptHeld && k.RolledBy != "":
			c.followOutcome(ctx, ex, ex.Namespace, k.RolledBy)
		case k.State != onchange.KeptHeld && k.Rollout != "":
			if _, err := c.a.cfg.Store.Get(ctx, ex.Namespace, onchange.RevertID(k.Rollout)); err == nil {
				c.followOutcome(ctx, ex, ex.Namespace, onchange.RevertID(k.Rollout))
				continue
			}
			if rec, err := c.a.cfg.Store.Get(ctx, ex.Namespace, k.Rollout); err == nil {
				c.startRevert(ctx, ex, rec)
			}
		}
	}
}

// sourceOf finds, among sources, the one a trigger names.
func sourceOf(sources map[onchange.Source]bool, ref string) (onchange.Source, bool) {
	for s := range sources {
		if s.Ref() == ref {
			return s, true
		}
	}
	return onchange.Source{}, false
}

// followOutcome waits, once per restart, for the end of restart id (a rollout, or a
// revert's restart) of a job that reverts, then reverts it if it failed, or forgets the
// values kept for it if it succeeded.
func (c *changeRunner) followOutcome(ctx context.Context, ex onchange.Explain, ns, id string) {
	if c.cfg.Values == nil || len(revertSources(ex)) == 0 {
		return
	}
	c.once(ctx, "outcome:"+id, func(ctx context.Context) {
		rec := c.awaitEnd(ctx, ns, id)
		switch {
		case rec == nil:
		case rec.Status == restart.StatusFailed && rec.Revert == nil:
			c.startRevert(ctx, ex, rec)
		case rec.Status == restart.StatusSucceeded:
			c.forgetKept(ctx, ex, rec)
		}
	})
}

// forgetKept forgets the values kept for the changes a rollout that succeeded answered:
// deleted once a rollout of the change succeeded; after a revert's restart succeeded, the
// kept variable stays, without its value, as the mark of the write-back (so that no agent
// rolls the write-back as a change), until the source's next change replaces it.
func (c *changeRunner) forgetKept(ctx context.Context, ex onchange.Explain, rec *restart.Record) {
	reverting := revertSources(ex)
	for _, t := range rec.Triggers {
		src, ok := sourceOf(reverting, t.Source)
		if !ok {
			continue
		}
		k, idx, err := c.cfg.Values.ReadKept(ctx, ex.Namespace, src)
		if err != nil || idx == 0 {
			continue
		}
		switch {
		case rec.Revert == nil && k.State == onchange.KeptHeld && k.BadIndex <= t.NewIndex:
			// kept for this change, or for an older one this rollout's success supersedes
			err = c.cfg.Values.DeleteKept(ctx, ex.Namespace, src, idx)
		case rec.Revert != nil && k.State == onchange.KeptReverted && k.Rollout == rec.Revert.Rollout && k.Value.Exists():
			k.Value = onchange.SourceValue{}
			_, err = c.cfg.Values.WriteKept(ctx, ex.Namespace, src, k, idx)
		}
		if err != nil && !errors.Is(err, onchange.ErrChanged) {
			c.log.Warn("forgetting a kept value no longer needed", "job", ex.JobID, "source", src.String(), "err", err)
		}
	}
}

// revertStep says how a step of a revert ended.
type revertStep int

const (
	stepDone  revertStep = iota
	stepStop             // the revert stops, for a reason that lasts (logged)
	stepRetry            // a request failed: the revert is tried again
)

// startRevert reverts rec in the background (once at a time in this agent), trying again
// after BusyRecheck while requests fail.
func (c *changeRunner) startRevert(ctx context.Context, ex onchange.Explain, rec *restart.Record) {
	c.once(ctx, "revert:"+rec.ID, func(ctx context.Context) {
		for {
			if c.revert(ctx, ex, rec) != stepRetry || !cluster.Sleep(ctx, c.cfg.BusyRecheck) {
				return
			}
		}
	})
}

// revert puts back the values a failed rollout replaced and files the restart of the
// allocations that restarted onto them.
func (c *changeRunner) revert(ctx context.Context, ex onchange.Explain, rec *restart.Record) revertStep {
	reverting := revertSources(ex)
	var writes []restart.RevertWrite
	var writtenAt time.Time
	for _, t := range rec.Triggers {
		src, ok := sourceOf(reverting, t.Source)
		if !ok {
			continue
		}
		w, at, step := c.writeBack(ctx, ex, rec, src, t)
		if step != stepDone {
			return step
		}
		writes = append(writes, w)
		writtenAt = maxTime(writtenAt, at)
	}
	if len(writes) == 0 {
		c.log.Warn("a rollout failed; none of its changes can be reverted (a prefix, a re-render): it stops", "job", ex.JobID, "restart", rec.ID)
		c.metrics.reverts.WithLabelValues("not_revertible").Inc()
		return stepStop
	}
	return c.fileRevert(ctx, ex, rec, writes, writtenAt)
}

// writeBack puts src back to its kept value for the failed rollout rec (its trigger t):
// exactly once, whatever agents did before (the kept variable's state and the source's
// check-and-set say what was done). It returns what was written and when, and whether the
// revert goes on, stops (said why) or is to be tried again (a failed request).
func (c *changeRunner) writeBack(ctx context.Context, ex onchange.Explain, rec *restart.Record, src onchange.Source, t restart.Trigger) (restart.RevertWrite, time.Time, revertStep) {
	v := c.cfg.Values
	log := c.log.With("job", ex.JobID, "restart", rec.ID, "source", src.String())
	for range 5 {
		k, idx, err := v.ReadKept(ctx, ex.Namespace, src)
		if err != nil {
			log.Warn("reading the kept value to revert a failed rollout", "err", err)
			c.metrics.reverts.WithLabelValues("error").Inc()
			return restart.RevertWrite{}, time.Time{}, stepRetry
		}
		if idx == 0 || k.BadIndex != t.NewIndex || k.Rollout != "" && k.Rollout != rec.ID {
			log.Warn("a rollout failed and is not reverted: the agent did not see the value its change replaced (no agent ran then, or the source changed again since)", "bad_index", t.NewIndex)
			c.metrics.reverts.WithLabelValues("unkept").Inc()
			return restart.RevertWrite{}, time.Time{}, stepStop
		}
		if k.State == onchange.KeptHeld {
			k.State, k.Rollout = onchange.KeptReverting, rec.ID
			if idx, err = v.WriteKept(ctx, ex.Namespace, src, k, idx); err != nil {
				if errors.Is(err, onchange.ErrChanged) {
					continue
				}
				log.Warn("marking the kept value as being reverted", "err", err)
				c.metrics.reverts.WithLabelValues("error").Inc()
				return restart.RevertWrite{}, time.Time{}, stepRetry
			}
		}
		cur, err := v.ReadValue(ctx, src)
		if err != nil {
			log.Warn("reading the source to revert a failed rollout", "err", err)
			c.metrics.reverts.WithLabelValues("error").Inc()
			return restart.RevertWrite{}, time.Time{}, stepRetry
		}
		written := cur.Index
		switch k.DecideWriteBack(cur) {
		case onchange.ChangedSince:
			log.Warn("a rollout failed and is not reverted: its source changed again since (someone acted); it is left as it is", "bad_index", k.BadIndex, "index", cur.Index)
			c.metrics.reverts.WithLabelValues("changed_since").Inc()
			if err := v.DeleteKept(ctx, ex.Namespace, src, idx); err != nil && !errors.Is(err, onchange.ErrChanged) {
				log.Warn("deleting a kept value no longer needed", "err", err)
			}
			return restart.RevertWrite{}, time.Time{}, stepStop
		case onchange.WriteNow:
			written, err = v.WriteBack(ctx, src, k.Value, k.BadIndex)
			if errors.Is(err, onchange.ErrChanged) {
				continue // someone wrote between the read and the write: read again who
			}
			if err != nil {
				log.Warn("writing the kept value back", "err", err)
				c.metrics.reverts.WithLabelValues("error").Inc()
				return restart.RevertWrite{}, time.Time{}, stepRetry
			}
			log.Info("a rollout failed: wrote the kept value back with check-and-set", "kept_at", v.KeptPath(src), "bad_index", k.BadIndex, "written_index", written)
		}
		if k.State != onchange.KeptReverted {
			k.State, k.WrittenIndex, k.WrittenAt = onchange.KeptReverted, written, c.a.cfg.Now().UnixNano()
			if _, err := v.WriteKept(ctx, ex.Namespace, src, k, idx); err != nil {
				if errors.Is(err, onchange.ErrChanged) {
					continue
				}
				log.Warn("marking the kept value as written back", "err", err)
				c.metrics.reverts.WithLabelValues("error").Inc()
				return restart.RevertWrite{}, time.Time{}, stepRetry
			}
		}
		return restart.RevertWrite{Source: src.Ref(), KeptPath: v.KeptPath(src), BadIndex: k.BadIndex, WrittenIndex: k.WrittenIndex},
			time.Unix(0, k.WrittenAt), stepDone
	}
	log.Warn("the kept value kept changing while a failed rollout was reverted: not reverted")
	c.metrics.reverts.WithLabelValues("error").Inc()
	return restart.RevertWrite{}, time.Time{}, stepRetry
}

// fileRevert files the restart of the allocations that restarted onto the bad values, once
// the templates had the group's debounce to render the values written back, under the
// revert's ID; then it follows it to forget the kept values when it succeeds.
func (c *changeRunner) fileRevert(ctx context.Context, ex onchange.Explain, rec *restart.Record, writes []restart.RevertWrite, writtenAt time.Time) revertStep {
	id := onchange.RevertID(rec.ID)
	if _, err := c.a.cfg.Store.Get(ctx, rec.Namespace, id); err == nil {
		c.followOutcome(ctx, ex, rec.Namespace, id)
		return stepDone
	}
	g, ok := groupOf(ex, rec)
	if !ok {
		return stepStop
	}
	if !cluster.Sleep(ctx, time.Until(writtenAt.Add(g.Debounce))) {
		return stepStop
	}
	spec := g.Spec
	spec.Groups = rec.Spec.Groups
	spec.OnlyAllocs = onchange.RestartedOnto(rec)
	plan, err := c.a.eng.Plan(ctx, engine.Request{Namespace: rec.Namespace, Job: rec.JobID, Spec: spec})
	if err != nil {
		c.log.Warn("planning the restart that reverts a failed rollout (the values are written back); trying again", "job", ex.JobID, "restart", rec.ID, "err", err)
		c.metrics.reverts.WithLabelValues("error").Inc()
		return stepRetry
	}
	back := plan.Record
	back.ID = id
	back.Revert = &restart.Revert{Rollout: rec.ID, Writes: writes}
	for _, w := range writes {
		back.Triggers = append(back.Triggers, restart.Trigger{Source: w.Source, OldIndex: w.BadIndex, NewIndex: w.WrittenIndex, ChangedAt: writtenAt})
	}
	back.AppendEvent(restart.Event{Time: c.a.cfg.Now(), Type: restart.EventCreated, Message: revertMessage(rec, writes, len(back.Allocs))})
	err = c.a.eng.Create(ctx, back)
	switch {
	case err == nil:
		c.log.Info("revert filed: the allocations that restarted onto the bad value are restarted again", "job", ex.JobID, "restart", id, "reverts", rec.ID, "allocs", len(back.Allocs))
		c.metrics.reverts.WithLabelValues("reverted").Inc()
		c.a.offerFiled(back.Namespace, back.ID, back.ModifyIndex)
	case errors.Is(err, store.ErrExists):
	default:
		c.log.Warn("filing the restart that reverts a failed rollout (the values are written back); trying again", "job", ex.JobID, "restart", rec.ID, "err", err)
		c.metrics.reverts.WithLabelValues("error").Inc()
		return stepRetry
	}
	c.followOutcome(ctx, ex, rec.Namespace, id)
	return stepDone
}

// revertMessage is the revert's first event: what was written back, where the value was
// kept, and what is restarted; never the value.
func revertMessage(rec *restart.Record, writes []restart.RevertWrite, allocs int) string {
	msg := fmt.Sprintf("Revert of rollout %s of job %q, which failed:", rec.ID, rec.JobID)
	for _, w := range writes {
		msg += fmt.Sprintf(" %s written back from %s with check-and-set on index %d (now index %d);", w.Source, w.KeptPath, w.BadIndex, w.WrittenIndex)
	}
	return msg + fmt.Sprintf(" restarting the %d allocation(s) that restarted onto the bad value", allocs)
}

// groupOf is the group of ex the rollout rec restarted (a rollout covers groups with the
// same options: the first one's are theirs).
func groupOf(ex onchange.Explain, rec *restart.Record) (onchange.Group, bool) {
	for _, g := range ex.Groups {
		for _, name := range rec.Spec.Groups {
			if g.Name == name {
				return g, true
			}
		}
	}
	return onchange.Group{}, false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
