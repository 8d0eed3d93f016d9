package sourcewatch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// A watched variable's change is seen with its new Index and ModifyTime; writes the source
// does not cover (a sibling in its group, the product's own records) send it nothing; a
// prefix counts what is under it, and a deletion lowers its Count.
func TestNomadChangesAreSeenAndOthersAreNot(t *testing.T) {
	t.Parallel()
	c, writer, ctx := startWriter(t)
	first := put(t, writer, "nomad/jobs/web/config", "1")
	put(t, writer, "nomad-restart/web/abc", "record")
	h := hubOn(t, c, Options{MinGap: testGap})

	web := h.Watch(ctx, variable("nomad/jobs/web/config"))
	under := h.Watch(ctx, prefix("nomad/jobs/web/"))
	group := h.Watch(ctx, prefix("nomad/")) // a witness that sees every answer of the group
	all := h.Watch(ctx, prefix(""))         // the whole namespace, but the product's records

	got := next(t, ctx, "the first State", web)
	want := State{Index: first.ModifyIndex, Count: 1, ChangedAt: nomadTime(first)}
	if !got.same(want) || !got.ChangedAt.Equal(want.ChangedAt) {
		t.Fatalf("first State %+v, want %+v", got, want)
	}
	if st := next(t, ctx, "the namespace's first State", all); st.Count != 1 {
		t.Fatalf("the whole namespace counts %d variables, want 1 (the product's records are not counted)", st.Count)
	}

	// Writes the variable does not cover: a sibling of its group, the product's records.
	sibling := put(t, writer, "nomad/jobs/api/config", "1")
	until(t, ctx, "the group's answer with the sibling", group, func(st State) bool { return st.Index == sibling.ModifyIndex })
	put(t, writer, "nomad-restart/web/abc/lease", "record")
	changed := put(t, writer, "nomad/jobs/web/config", "2")
	got = next(t, ctx, "the change", web)
	want = State{Index: changed.ModifyIndex, Count: 1, ChangedAt: nomadTime(changed)}
	if !got.same(want) || !got.ChangedAt.Equal(want.ChangedAt) {
		t.Fatalf("after the change: %+v, want %+v (a write it does not cover was sent?)", got, want)
	}
	if st := until(t, ctx, "the namespace's count", all, func(st State) bool { return st.Index == changed.ModifyIndex }); st.Count != 2 {
		t.Errorf("the whole namespace counts %d variables, want 2", st.Count)
	}

	second := put(t, writer, "nomad/jobs/web/extra", "x")
	st := until(t, ctx, "the prefix's second entry", under, func(st State) bool { return st.Count == 2 })
	if st.Index != second.ModifyIndex || !st.ChangedAt.Equal(nomadTime(second)) {
		t.Errorf("prefix State %+v, want Index %d at %v", st, second.ModifyIndex, nomadTime(second))
	}
	del(t, writer, "nomad/jobs/web/extra")
	st = until(t, ctx, "the deletion", under, func(st State) bool { return st.Count == 1 })
	if st.Index != changed.ModifyIndex || !st.ChangedAt.After(nomadTime(second)) || st.Err != nil {
		t.Errorf("after the deletion: %+v, want Index %d, a ChangedAt after the last write", st, changed.ModifyIndex)
	}
	del(t, writer, "nomad/jobs/web/config")
	if st := next(t, ctx, "the variable's deletion", web); st.Count != 0 || st.Index != 0 {
		t.Errorf("a deleted variable shows %+v, want Count 0 and Index 0", st)
	}
}

// 200 sources under one first segment share one blocking query, and each gets its own
// change; a source whose last watcher left no longer holds the query.
func TestTwoHundredSourcesShareOneQuery(t *testing.T) {
	t.Parallel()
	const n = 200
	_, writer, client, tr, ctx := startTracked(t)
	path := func(i int) string { return fmt.Sprintf("nomad/jobs/job-%03d/config", i) }
	for i := range n {
		put(t, writer, path(i), "1")
	}
	h := New(nomadvars.New(client, nomadvars.Options{}), Options{MinGap: testGap})
	watchCtx, stop := context.WithCancel(ctx)
	chans := make([]<-chan State, n)
	for i := range n {
		chans[i] = h.Watch(watchCtx, variable(path(i)))
	}
	for i := range n {
		if st := next(t, ctx, path(i), chans[i]); st.Count != 1 {
			t.Fatalf("%s: first State %+v", path(i), st)
		}
	}
	simtest.WaitFor(t, ctx, "the blocking query", func() bool { return tr.Counts().Blocking == 1 })

	written := make([]uint64, n)
	for i := range n {
		written[i] = put(t, writer, path(i), "2").ModifyIndex
	}
	for i := range n {
		st := until(t, ctx, path(i)+"'s change", chans[i], func(st State) bool { return st.Index >= written[i] })
		if st.Index != written[i] || st.Count != 1 {
			t.Errorf("%s shows %+v, want its own change at index %d", path(i), st, written[i])
		}
	}
	if peak := tr.Counts().Peak; peak != 1 {
		t.Errorf("%d blocking queries were open at once for %d sources of one group, want 1", peak, n)
	}

	stop()
	for i := range n {
		for range chans[i] {
		}
	}
	simtest.WaitFor(t, ctx, "the query to end once no one watches", func() bool { return tr.Counts().Blocking == 0 })
	h.mu.Lock()
	left := len(h.groups)
	h.mu.Unlock()
	if left != 0 {
		t.Errorf("%d groups remain after every watcher left", left)
	}
}

// A watcher that leaves does not stop the query others of its group still need.
func TestLeavingKeepsTheGroupForOthers(t *testing.T) {
	t.Parallel()
	_, writer, client, tr, ctx := startTracked(t)
	put(t, writer, "nomad/jobs/a/config", "1")
	h := New(nomadvars.New(client, nomadvars.Options{}), Options{MinGap: testGap})
	leaverCtx, leave := context.WithCancel(ctx)
	leaver := h.Watch(leaverCtx, variable("nomad/jobs/a/config"))
	stayer := h.Watch(ctx, variable("nomad/jobs/a/config"))
	next(t, ctx, "the leaver's first State", leaver)
	next(t, ctx, "the stayer's first State", stayer)
	leave()
	for range leaver {
	}
	v := put(t, writer, "nomad/jobs/a/config", "2")
	until(t, ctx, "the change after the other left", stayer, func(st State) bool { return st.Index == v.ModifyIndex })
	simtest.WaitFor(t, ctx, "the group's next blocking query", func() bool { return tr.Counts().Blocking == 1 })
	if peak := tr.Counts().Peak; peak != 1 {
		t.Errorf("%d blocking queries were open at once for one group, want 1", peak)
	}
}

// Transient failures (Nomad's 503 while it has no leader) are ridden out: the watch
// answers once Nomad does, without an error on the way.
func TestTransientFailuresAreRetried(t *testing.T) {
	t.Parallel()
	_, writer, client, tr, ctx := startTracked(t)
	v := put(t, writer, "nomad/jobs/a/config", "1")
	failures := 0
	tr.SetFail(func(r *http.Request) *http.Response {
		if failures == 2 {
			return nil
		}
		failures++ // one request at a time: the group's loop is the only caller
		return simtest.StatusAnswer(r, http.StatusServiceUnavailable)
	})
	h := New(nomadvars.New(client, nomadvars.Options{}), Options{MinGap: testGap})
	st := next(t, ctx, "the first State", h.Watch(ctx, variable("nomad/jobs/a/config")))
	if st.Err != nil || st.Index != v.ModifyIndex {
		t.Errorf("after two 503s: %+v, want Index %d and no error", st, v.ModifyIndex)
	}
	if lists := tr.Counts().Lists; lists < 3 {
		t.Errorf("%d listings, want the two that failed and one more", lists)
	}
}

// Nomad leaves out of a listing the variables a token may not list, so such a token sees
// none; a token Nomad refuses (unknown) is a denial that names the capability to grant;
// a token with list (and no read) on the path watches it.
func TestACLs(t *testing.T) {
	t.Parallel()
	c := simtest.Start(t, nomadsim.Options{TimeScale: realTime, ACLs: true})
	ctx := testContext(t)
	v := put(t, simtest.ClientAs(t, c, c.BootstrapToken()), "nomad/jobs/web/config", "secret")
	listOnly := simtest.Token(t, c, "list-only", `namespace "default" { variables { path "nomad/jobs/*" { capabilities = ["list"] } } }`)
	other := simtest.Token(t, c, "other", `namespace "default" { variables { path "elsewhere/*" { capabilities = ["list"] } } }`)
	src := variable("nomad/jobs/web/config")
	for _, tc := range []struct {
		name, token string
		check       func(State) string
	}{
		{"list only", listOnly, func(st State) string {
			if st.Err != nil || st.Index != v.ModifyIndex || st.Count != 1 {
				return fmt.Sprintf("want Index %d, Count 1, no error", v.ModifyIndex)
			}
			return ""
		}},
		{"no list on the path", other, func(st State) string {
			if st.Err != nil || st.Count != 0 {
				return "want Count 0 and no error (Nomad filters the listing)"
			}
			return ""
		}},
		{"unknown token", "3f2a7a8e-0000-4000-8000-000000000000", func(st State) string {
			if !contains(st.Err, `denied "list"`) || !contains(st.Err, `capabilities = ["list"]`) || !contains(st.Err, `path "nomad/jobs/web/config"`) {
				return "want an error naming the list capability and the rule to grant"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := next(t, ctx, "the first State", New(nomadvars.New(simtest.ClientAs(t, c, tc.token), nomadvars.Options{}), Options{MinGap: testGap}).Watch(ctx, src))
			if msg := tc.check(st); msg != "" {
				t.Errorf("%+v: %s", st, msg)
			}
		})
	}
}

// The shipped agent policy lists sources and never reads them: a job that reverts needs
// read and write on its variable, and a denial says so with the rule to grant.
func TestReadValueDeniedNamesTheRuleToGrant(t *testing.T) {
	t.Parallel()
	c := simtest.Start(t, nomadsim.Options{TimeScale: realTime, ACLs: true})
	ctx := testContext(t)
	put(t, simtest.ClientAs(t, c, c.BootstrapToken()), "nomad/jobs/web/config", "good")
	listOnly := simtest.Token(t, c, "list-only", `namespace "default" { variables { path "nomad/jobs/*" { capabilities = ["list"] } } }`)
	h := New(nomadvars.New(simtest.ClientAs(t, c, listOnly), nomadvars.Options{}), Options{})
	_, err := h.ReadValue(ctx, variable("nomad/jobs/web/config"))
	want := `grant it namespace "default" { variables { path "nomad/jobs/web/config" { capabilities = ["list", "read", "write"] } } }`
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `denied "read"`) {
		t.Errorf("a read denied: %v; want it to name the read denied and %s", err, want)
	}
}

// A denial is asked again (slowly), so that a fixed token or policy is picked up without
// a restart of the agent; the State then loses its error.
func TestDenialIsRetried(t *testing.T) {
	t.Parallel()
	_, writer, client, tr, ctx := startTracked(t)
	v := put(t, writer, "nomad/jobs/a/config", "1")
	tr.SetFail(func(r *http.Request) *http.Response { return simtest.StatusAnswer(r, http.StatusForbidden) })
	h := New(nomadvars.New(client, nomadvars.Options{}), Options{MinGap: testGap})
	h.slowRetry = 20 * time.Millisecond
	ch := h.Watch(ctx, variable("nomad/jobs/a/config"))
	if st := next(t, ctx, "the denial", ch); !contains(st.Err, "list") {
		t.Fatalf("a 403 gave %+v, want an error naming list", st)
	}
	tr.SetFail(nil)
	st := until(t, ctx, "the State once allowed", ch, func(st State) bool { return st.Err == nil })
	if st.Index != v.ModifyIndex {
		t.Errorf("once allowed: %+v, want Index %d", st, v.ModifyIndex)
	}
}

func TestGroupPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, want string }{
		{"nomad/jobs/web/config", "nomad/"},
		{"nomad/", "nomad/"},
		{"config", "config"},
		{"", ""},
		{"nomad-restart/web", "nomad-restart/"},
	} {
		if got := groupPrefix(tc.path); got != tc.want {
			t.Errorf("groupPrefix(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
	if keyOf(variable("nomad/jobs/web/config")) != keyOf(prefix("nomad/jobs/api/")) {
		t.Error("two sources under nomad/ are in different groups")
	}
	if strings.HasPrefix("nomad-restart/web/x", groupPrefix("nomad/jobs/web/config")) {
		t.Error("the group of nomad/ covers the product's records")
	}
}

func TestCovered(t *testing.T) {
	t.Parallel()
	l := newListing(metas("nomad/a", "nomad/ab", "nomad/a/x", "nomad-restart/j/1", "other"))
	for _, tc := range []struct {
		src  onchange.Source
		want []string
	}{
		{variable("nomad/a"), []string{"nomad/a"}},
		{prefix("nomad/a"), []string{"nomad/a", "nomad/a/x", "nomad/ab"}},
		{prefix("nomad/a/"), []string{"nomad/a/x"}},
		{prefix(""), []string{"nomad/a", "nomad/a/x", "nomad/ab", "other"}},
		{prefix("nomad-restart/"), []string{"nomad-restart/j/1"}},
		{variable("missing"), nil},
	} {
		var got []string
		for _, m := range l.covered(tc.src, "nomad-restart/") {
			got = append(got, m.Path)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s covers %v, want %v", tc.src, got, tc.want)
		}
	}
}

// metas are listing entries at paths, with increasing indexes.
func metas(paths ...string) []*nomadvars.Metadata {
	out := make([]*nomadvars.Metadata, len(paths))
	for i, p := range paths {
		out[i] = &nomadvars.Metadata{Namespace: "default", Path: p, ModifyIndex: uint64(i + 1)}
	}
	return out
}

// An answer whose index went backwards (a new leader behind the old one) makes the next
// listing start over at index 0, rather than block on an index that may never come.
func TestIndexGoingBackwardsStartsOver(t *testing.T) {
	t.Parallel()
	c, writer, ctx := startWriter(t)
	put(t, writer, "nomad/jobs/a/config", "1")
	var (
		mu      sync.Mutex
		indexes []string // the index of each listing, in order
	)
	client := simtest.ClientVia(t, c, "", roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		indexes = append(indexes, r.URL.Query().Get("index"))
		n := len(indexes)
		mu.Unlock()
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && n == 2 { // the first blocking answer says it is at index 1
			resp.Header.Set("X-Nomad-Index", "1")
		}
		return resp, err
	}))
	ch := New(nomadvars.New(client, nomadvars.Options{}), Options{MinGap: testGap}).Watch(ctx, variable("nomad/jobs/a/config"))
	next(t, ctx, "the first State", ch)
	simtest.WaitFor(t, ctx, "the blocking listing", func() bool { mu.Lock(); defer mu.Unlock(); return len(indexes) == 2 })
	v := put(t, writer, "nomad/jobs/a/config", "2")
	if st := next(t, ctx, "the change", ch); st.Index != v.ModifyIndex {
		t.Errorf("the change shows %+v, want Index %d (from the entries, whatever the header says)", st, v.ModifyIndex)
	}
	simtest.WaitFor(t, ctx, "two more listings", func() bool { mu.Lock(); defer mu.Unlock(); return len(indexes) >= 4 })
	mu.Lock()
	defer mu.Unlock()
	if indexes[0] != "" || indexes[1] == "" || indexes[2] != "" || indexes[3] == "" {
		t.Errorf("the listings' indexes were %q, want none, one, none after the index went backwards, then one", indexes)
	}
}
