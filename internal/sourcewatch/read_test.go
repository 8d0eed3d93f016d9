package sourcewatch

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// Read gives each source what a watch's first answer gives, with one listing per Nomad
// group in the sources' region: a variable's newest index and Nomad's time of it, none for
// a missing one, a prefix's newest entry, a Consul key's index without a time.
func TestRead(t *testing.T) {
	t.Parallel()
	c, writer, client, tr, ctx := startTracked(t)
	put(t, writer, "nomad/jobs/web/config", "1")
	config := put(t, writer, "nomad/jobs/web/config", "2")
	under := put(t, writer, "nomad/jobs/web/config2", "1")
	put(t, writer, "nomad-restart/web/abc", "record")
	c.ConsulKVPut("app/config", "1")
	c.ConsulKVPut("app/other", "1")
	var (
		mu      sync.Mutex
		regions []string
	)
	tr.SetFail(func(r *http.Request) *http.Response {
		mu.Lock()
		defer mu.Unlock()
		regions = append(regions, r.URL.Query().Get("region"))
		return nil
	})
	consul := &consulClients{addr: c.ConsulAddr()}
	h := New(nomadvars.New(client, nomadvars.Options{}), Options{Consul: consul.client})

	exact, missing, tree, all := variable("nomad/jobs/web/config"), variable("nomad/jobs/web/extra"), prefix("nomad/jobs/web/"), prefix("")
	key, noKey, keys := consulKey("app/config"), consulKey("app/nosuch"), consulPrefix("app/")
	got := h.Read(ctx, []onchange.Source{exact, missing, tree, all, key, noKey, keys, exact})

	for _, tc := range []struct {
		src  onchange.Source
		want *api.Variable // nil: none
	}{{exact, config}, {missing, nil}, {tree, under}, {all, under}} {
		st := got[tc.src]
		switch {
		case st.Err != nil:
			t.Errorf("%s: %v", tc.src, st.Err)
		case tc.want == nil && (st.Count != 0 || st.Index != 0):
			t.Errorf("%s: %+v, want none", tc.src, st)
		case tc.want != nil && (st.Index != tc.want.ModifyIndex || !st.ChangedAt.Equal(nomadTime(tc.want))):
			t.Errorf("%s: %+v, want index %d at %v", tc.src, st, tc.want.ModifyIndex, nomadTime(tc.want))
		}
	}
	if n := got[all].Count; n != 2 {
		t.Errorf("the whole namespace counts %d variables, want 2 (the product's records are not counted)", n)
	}
	if lists := tr.Counts().Lists; lists != 2 {
		t.Errorf("%d listings, want 2: one for the sources under nomad/, one for the whole namespace", lists)
	}
	mu.Lock()
	for _, r := range regions {
		if r != "global" {
			t.Errorf("a listing went to region %q, want the sources' global", r)
		}
	}
	mu.Unlock()

	if st := got[key]; st.Err != nil || st.Count != 1 || st.Index == 0 || !st.ChangedAt.IsZero() {
		t.Errorf("Consul key: %+v, want its index and no time", st)
	}
	if st := got[noKey]; st.Err != nil || st.Count != 0 {
		t.Errorf("missing Consul key: %+v, want none", st)
	}
	if st := got[keys]; st.Err != nil || st.Count != 2 || st.Index < got[key].Index {
		t.Errorf("Consul prefix: %+v, want both keys", st)
	}
}

// Read words what it cannot read as a watch does: a denial is a *DeniedError naming the
// rule to grant, a hub without Consul says so, and a Consul that does not answer is asked
// for its first source only.
func TestReadErrors(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)

	c := simtest.Start(t, nomadsim.Options{TimeScale: realTime, ACLs: true})
	unknown := simtest.ClientAs(t, c, "3f2a7a8e-0000-4000-8000-000000000000")
	src := prefix("nomad/jobs/")
	var denied *DeniedError
	st := New(nomadvars.New(unknown, nomadvars.Options{}), Options{}).Read(ctx, []onchange.Source{src})[src]
	if !errors.As(st.Err, &denied) || !errors.Is(st.Err, cluster.ErrPermissionDenied) ||
		denied.Rule() != `namespace "default" { variables { path "nomad/jobs/*" { capabilities = ["list"] } } }` {
		t.Errorf("an unknown token: %v, want a denial naming the list rule", st.Err)
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	t.Cleanup(refusing.Close)
	src = consulPrefix("app/")
	st = New(nil, Options{Consul: (&consulClients{addr: refusing.URL}).client}).Read(ctx, []onchange.Source{src})[src]
	if !errors.As(st.Err, &denied) || denied.Rule() != `key_prefix "app/" { policy = "read" }` || !contains(st.Err, "denied key read") {
		t.Errorf("a Consul denial: %v, want one naming the key_prefix rule", st.Err)
	}

	src = consulKey("app/config")
	if st := New(nil, Options{}).Read(ctx, []onchange.Source{src})[src]; !errors.Is(st.Err, ErrNoConsul) {
		t.Errorf("without Consul: %v, want ErrNoConsul", st.Err)
	}

	down := &consulClients{addr: simtest.ClosedAddr(t)}
	h := New(nil, Options{Consul: down.client})
	h.readRetry = cluster.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, MaxElapsed: 20 * time.Millisecond}
	first, second := consulKey("app/a"), consulKey("app/b")
	got := h.Read(ctx, []onchange.Source{first, second})
	if !cluster.IsTransient(got[first].Err) || !cluster.IsTransient(got[second].Err) {
		t.Errorf("a Consul that is down: %v and %v, want its transient failure for both", got[first].Err, got[second].Err)
	}
	down.mu.Lock()
	defer down.mu.Unlock()
	if len(down.dcs) != 1 {
		t.Errorf("Consul was asked %d times for a client, want once: the second source is not read again", len(down.dcs))
	}
}

// A Nomad source's State is the newest of what it covers: its exact path for a variable,
// everything under its path for a prefix, leaving out the product's records unless the
// prefix itself lies among them.
func TestNomadAnswerIsTheNewestCovered(t *testing.T) {
	t.Parallel()
	meta := func(path string, index uint64) *nomadvars.Metadata {
		return &nomadvars.Metadata{Path: path, ModifyIndex: index, ModifyTime: time.Unix(int64(index), 0)}
	}
	answer := New(nil, Options{}).nomadAnswer(newListing([]*nomadvars.Metadata{
		meta("nomad/jobs/web", 5),
		meta("nomad/jobs/web/config", 7),
		meta("nomad/jobs/web/config2", 12),
		meta("nomad/jobs/web/extra", 9),
		meta("nomad/jobs/webapp", 30),
		meta("nomad-restart/web/0b0c3e52", 40),
		nil,
	}), time.Now())
	exact := func(path string) onchange.Source { return onchange.Source{Kind: onchange.NomadVariable, Path: path} }
	under := func(path string) onchange.Source { return onchange.Source{Kind: onchange.NomadPrefix, Path: path} }
	for _, tc := range []struct {
		name string
		src  onchange.Source
		want uint64 // 0: covers nothing
	}{
		{"exact path only, not one that extends it", exact("nomad/jobs/web/config"), 7},
		{"exact path missing", exact("nomad/jobs/web/nosuch"), 0},
		{"prefix with its slash", under("nomad/jobs/web/"), 12},
		{"prefix without a slash reaches the names that extend it", under("nomad/jobs/web"), 30},
		{"the whole namespace, without the restart records", under(""), 30},
		{"a prefix among the records counts them", under("nomad-restart/"), 40},
		{"prefix covering nothing", under("other/"), 0},
	} {
		st := answer(tc.src, State{}, false)
		switch {
		case tc.want == 0 && (st.Count != 0 || st.Index != 0 || !st.ChangedAt.IsZero()):
			t.Errorf("%s: got %+v, want nothing covered", tc.name, st)
		case tc.want != 0 && (st.Index != tc.want || !st.ChangedAt.Equal(time.Unix(int64(tc.want), 0))):
			t.Errorf("%s: got %d at %v, want %d at %v", tc.name, st.Index, st.ChangedAt, tc.want, time.Unix(int64(tc.want), 0))
		}
	}
}
