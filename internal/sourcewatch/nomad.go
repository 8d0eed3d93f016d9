package sourcewatch

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// groupPrefix is the prefix of the one listing that covers path: its first segment with
// the slash ("nomad/" for "nomad/jobs/web/config"), so that every source under it shares
// a query, and the slash keeps "nomad/" from matching the product's "nomad-restart/…".
// A path without a slash is its own prefix ("" lists the whole namespace).
func groupPrefix(path string) string {
	if i := strings.IndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return path
}

// runNomad lists the group's prefix with blocking queries (cluster.Watch) until ctx ends,
// publishing each answer to the group's sources, and each failure that lasts.
func (h *Hub) runNomad(ctx context.Context, g *group) {
	if h.watching == nil {
		h.publishErr(g, errNoNomad)
		<-ctx.Done()
		return
	}
	vars := h.watching.InRegion(g.key.region)
	log := h.opts.Logger.With("namespace", g.key.namespace, "region", g.key.region, "prefix", g.key.prefix)
	w := &cluster.Watch{What: "watching Nomad variables", Log: log, Policy: cluster.DefaultRetryPolicy(), MinGap: h.opts.MinGap}
	var streak failureStreak
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		metas, got, err := vars.ListAfter(ctx, g.key.namespace, g.key.prefix, nomadvars.Wait{After: index})
		if err != nil {
			if ctx.Err() == nil {
				h.failed(ctx, g, &streak, "Nomad", err)
			}
			return 0, err
		}
		streak = failureStreak{}
		h.publish(g, h.nomadAnswer(newListing(metas), time.Now()))
		return got, nil
	})
}

// failed handles a failed query of a group before its watch retries it: a transient
// error is published once it has lasted the retry policy's MaxElapsed (and again each
// time as long); any other error (a denial, a bad request) is published at once and asked
// again after the slow retry. server names who did not answer.
func (h *Hub) failed(ctx context.Context, g *group, streak *failureStreak, server string, err error) {
	if !cluster.IsTransient(err) {
		h.publishErr(g, err)
		cluster.Sleep(ctx, h.slowRetry)
		return
	}
	if lasted := cluster.DefaultRetryPolicy().MaxElapsed; streak.lasted(lasted) {
		h.publishErr(g, fmt.Errorf("no answer from %s for %s, still trying: %w", server, lasted, err))
	}
}

// failureStreak times a streak of transient failures; its zero value is no streak.
type failureStreak struct{ since time.Time }

// lasted reports, once per d, that the streak has lasted d; the first call starts it.
func (f *failureStreak) lasted(d time.Duration) bool {
	now := time.Now()
	if f.since.IsZero() {
		f.since = now
		return false
	}
	if now.Sub(f.since) < d {
		return false
	}
	f.since = now
	return true
}

// listing is one answer of a group's listing, ordered by path for range lookups.
type listing []*nomadvars.Metadata

// newListing orders metas (in place), leaving out nil entries (a null in Nomad's answer).
func newListing(metas []*nomadvars.Metadata) listing {
	l := listing(slices.DeleteFunc(metas, func(m *nomadvars.Metadata) bool { return m == nil }))
	sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	return l
}

// covered returns the entries src covers: its exact path for a variable, everything
// under its path for a prefix, except the product's own records (under records) unless
// the prefix itself lies there.
func (l listing) covered(src onchange.Source, records string) []*nomadvars.Metadata {
	from := sort.Search(len(l), func(i int) bool { return l[i].Path >= src.Path })
	var out []*nomadvars.Metadata
	skipRecords := !strings.HasPrefix(src.Path, records)
	for _, m := range l[from:] {
		if src.Kind == onchange.NomadVariable && m.Path != src.Path {
			break
		}
		if !strings.HasPrefix(m.Path, src.Path) {
			break
		}
		if skipRecords && strings.HasPrefix(m.Path, records) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// nomadAnswer applies a listing to a source. ChangedAt is the newest ModifyTime of the
// entries (Nomad's clock); a deletion, for which Nomad keeps no time, is dated now, when
// this hub saw it.
func (h *Hub) nomadAnswer(l listing, now time.Time) answerFunc {
	return func(src onchange.Source, prev State, known bool) State {
		var st State
		for _, m := range l.covered(src, h.opts.RecordsPrefix) {
			st.Count++
			st.Index = max(st.Index, m.ModifyIndex)
			if m.ModifyTime.After(st.ChangedAt) {
				st.ChangedAt = m.ModifyTime
			}
		}
		if known && st.Count < prev.Count {
			st.ChangedAt = now
		}
		return st
	}
}
