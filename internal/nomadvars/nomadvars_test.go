package nomadvars_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T) (*nomadsim.Cluster, *nomadvars.Client) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{})
	cl := simtest.Client(t, c)
	return c, nomadvars.New(cl, nomadvars.Options{})
}

func TestEscapeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"web", "web"},
		{"my-job_2", "my-job_2"},
		{"a.b/c", "a~2Eb~2Fc"},
		{"~", "~7E"},
	} {
		if got := nomadvars.EscapeSegment(tc.in, 0); got != tc.want {
			t.Errorf("escapeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("j.", 100)
	got := nomadvars.EscapeSegment(long, 60)
	if len(got) > 60 || got == nomadvars.EscapeSegment(long+"x", 60) {
		t.Fatalf("long names: %q (%d chars) must fit and stay distinct", got, len(got))
	}
}

// Every name comes back from its segment, no segment is reserved, and what a write stores
// under an escaped path lists under it.
func TestEscapeRoundTrip(t *testing.T) {
	_, vars := newClient(t)
	ctx := ctxT(t)
	names := []string{"web", "a.b/c", "~", "~schedules", "ünïcode job", "x~7E", "with space/and:colon", "-_-"}
	for _, name := range names {
		seg := nomadvars.EscapeSegment(name, 0)
		if back, ok := nomadvars.UnescapeSegment(seg); !ok || back != name {
			t.Errorf("UnescapeSegment(EscapeSegment(%q)) = %q, %v", name, back, ok)
		}
		if nomadvars.Reserved(seg) {
			t.Errorf("EscapeSegment(%q) = %q is reserved", name, seg)
		}
		path := "test/" + seg + "/v"
		if _, err := vars.Write(ctx, &nomadvars.Variable{Path: path, Items: map[string]string{"name": name}}); err != nil {
			t.Fatalf("writing %q: %v", path, err)
		}
		metas, err := vars.List(ctx, "default", "test/"+seg+"/")
		if err != nil || len(metas) != 1 || metas[0].Path != path {
			t.Fatalf("listing under %q: %v, %v", seg, metas, err)
		}
	}
	if _, ok := nomadvars.UnescapeSegment("a.b"); ok {
		t.Error("UnescapeSegment accepted a segment EscapeSegment never makes")
	}
	if !nomadvars.Reserved("~schedules") || nomadvars.Reserved("~7E") {
		t.Error("Reserved must hold for ~ and a lower-case letter only")
	}
}

func TestReadNotFound(t *testing.T) {
	_, vars := newClient(t)
	if _, err := vars.Read(ctxT(t), "", "nothing/here"); !errors.Is(err, nomadvars.ErrNotFound) {
		t.Fatalf("Read of a missing variable: %v, want ErrNotFound", err)
	}
}

// Check-and-set writes and deletes: a create meets an existing variable, an update or a
// delete a stale index, each with a *ConflictError carrying the variable as it is.
func TestCheckAndSet(t *testing.T) {
	_, vars := newClient(t)
	ctx := ctxT(t)
	v1, err := vars.Write(ctx, &nomadvars.Variable{Path: "cas/a", Items: map[string]string{"k": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	var conflict *nomadvars.ConflictError
	_, err = vars.Write(ctx, &nomadvars.Variable{Path: "cas/a", Items: map[string]string{"k": "other"}})
	if !errors.As(err, &conflict) || conflict.Current == nil || conflict.Current.Items["k"] != "1" || conflict.Current.ModifyIndex != v1.ModifyIndex {
		t.Fatalf("create over an existing variable: %v, want a conflict carrying it", err)
	}
	v2, err := vars.Write(ctx, &nomadvars.Variable{Path: "cas/a", Items: map[string]string{"k": "2"}, ModifyIndex: v1.ModifyIndex})
	if err != nil || v2.ModifyIndex <= v1.ModifyIndex {
		t.Fatalf("update at the current index: %v, %v", v2, err)
	}
	_, err = vars.Write(ctx, &nomadvars.Variable{Path: "cas/a", Items: map[string]string{"k": "3"}, ModifyIndex: v1.ModifyIndex})
	if !errors.As(err, &conflict) || conflict.CheckIndex != v1.ModifyIndex || conflict.Current.Items["k"] != "2" {
		t.Fatalf("update at a stale index: %v, want a conflict carrying the current variable", err)
	}
	if err := vars.DeleteAt(ctx, "", "cas/a", v1.ModifyIndex); !errors.As(err, &conflict) {
		t.Fatalf("delete at a stale index: %v, want a conflict", err)
	}
	if err := vars.DeleteAt(ctx, "", "cas/a", v2.ModifyIndex); err != nil {
		t.Fatalf("delete at the current index: %v", err)
	}
	if _, err := vars.Read(ctx, "", "cas/a"); !errors.Is(err, nomadvars.ErrNotFound) {
		t.Fatalf("read after delete: %v", err)
	}
	_, err = vars.Write(ctx, &nomadvars.Variable{Path: "cas/a", Items: map[string]string{"k": "4"}, ModifyIndex: v2.ModifyIndex})
	if !errors.As(err, &conflict) || conflict.Current != nil {
		t.Fatalf("update of a deleted variable: %v, want a conflict with no current variable", err)
	}
	if err := vars.Delete(ctx, "", "cas/a"); err != nil {
		t.Fatalf("delete of a missing variable: %v", err)
	}
}

// loseAnswers is a transport that sends the first n requests matching match to Nomad and
// then reports their answers lost, as a connection cut after the write landed would.
type loseAnswers struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	mu    sync.Mutex
	n     int
}

func (l *loseAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	l.mu.Lock()
	lose := err == nil && l.n > 0 && l.match(r)
	if lose {
		l.n--
	}
	l.mu.Unlock()
	if lose {
		_ = resp.Body.Close()
		return nil, io.ErrUnexpectedEOF
	}
	return resp, err
}

// sendThrough returns a Client whose requests pass through wrap(the default transport).
func sendThrough(t *testing.T, c *nomadsim.Cluster, rt func(http.RoundTripper) http.RoundTripper) *nomadvars.Client {
	t.Helper()
	return nomadvars.New(simtest.ClientVia(t, c, "", rt(http.DefaultTransport)), nomadvars.Options{})
}

// A check-and-set write or delete that landed but whose answer was lost is sent again,
// and the conflict it then meets is recognised as its own success.
func TestLostAnswersRecognised(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	puts := &loseAnswers{match: func(r *http.Request) bool { return r.Method != http.MethodGet }, n: 1}
	vars := sendThrough(t, c, func(next http.RoundTripper) http.RoundTripper { puts.next = next; return puts })
	v, err := vars.Write(ctx, &nomadvars.Variable{Path: "lost/a", Items: map[string]string{"k": "1"}})
	if err != nil || v.Items["k"] != "1" {
		t.Fatalf("create whose answer was lost: %v, %v", v, err)
	}
	puts.n = 1
	v2, err := vars.Write(ctx, &nomadvars.Variable{Path: "lost/a", Items: map[string]string{"k": "2"}, ModifyIndex: v.ModifyIndex})
	if err != nil || v2.Items["k"] != "2" {
		t.Fatalf("update whose answer was lost: %v, %v", v2, err)
	}
	puts.n = 1
	if err := vars.DeleteAt(ctx, "", "lost/a", v2.ModifyIndex); err != nil {
		t.Fatalf("delete whose answer was lost: %v", err)
	}
	if _, err := vars.Read(ctx, "", "lost/a"); !errors.Is(err, nomadvars.ErrNotFound) {
		t.Fatalf("read after the delete: %v", err)
	}
}

// A 429 (too many requests) and a 5xx are retried; a Watching client tries once.
func TestRetriesTransient(t *testing.T) {
	c, vars := newClient(t)
	ctx := ctxT(t)
	if _, err := vars.Write(ctx, &nomadvars.Variable{Path: "retry/a", Items: map[string]string{"k": "1"}}); err != nil {
		t.Fatal(err)
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusInternalServerError} {
		remove := c.SetFault(nomadsim.Fault{Method: http.MethodGet, Path: "/v1/var/", Status: status})
		if _, err := vars.Watching().Read(ctx, "", "retry/a"); err == nil || !cluster.IsTransient(err) {
			t.Fatalf("a watching read under %d: %v, want the transient failure", status, err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			remove()
		}()
		if v, err := vars.Read(ctx, "", "retry/a"); err != nil || v.Items["k"] != "1" {
			t.Fatalf("a read under %d that passes: %v, %v", status, v, err)
		}
	}
}

// Locks: one holder at a time, renewals while held, ErrLockLost once released.
func TestLocks(t *testing.T) {
	_, vars := newClient(t)
	ctx := ctxT(t)
	v := &nomadvars.Variable{Path: "locks/a", Items: map[string]string{"holder": "one"}}
	got, lock, err := vars.AcquireLock(ctx, v, 15*time.Second, 15*time.Second)
	if err != nil || lock.ID == "" || got.Items["holder"] != "one" || lock.Namespace != "default" {
		t.Fatalf("AcquireLock: %v, %+v, %v", got, lock, err)
	}
	other := &nomadvars.Variable{Path: "locks/a", Items: map[string]string{"holder": "two"}}
	if _, _, err := vars.AcquireLock(ctx, other, 15*time.Second, 15*time.Second); !errors.Is(err, nomadvars.ErrLockHeld) {
		t.Fatalf("AcquireLock of a held lock: %v, want ErrLockHeld", err)
	}
	if err := vars.RenewLock(ctx, lock); err != nil {
		t.Fatalf("RenewLock: %v", err)
	}
	if _, err := vars.ReleaseLock(ctx, lock); err != nil {
		t.Fatalf("ReleaseLock: %v", err)
	}
	if err := vars.RenewLock(ctx, lock); !errors.Is(err, nomadvars.ErrLockLost) {
		t.Fatalf("RenewLock after the release: %v, want ErrLockLost", err)
	}
	if _, err := vars.ReleaseLock(ctx, lock); !errors.Is(err, nomadvars.ErrLockLost) {
		t.Fatalf("ReleaseLock after the release: %v, want ErrLockLost", err)
	}
	if _, _, err := vars.AcquireLock(ctx, other, 15*time.Second, 15*time.Second); err != nil {
		t.Fatalf("AcquireLock of a released lock: %v", err)
	}
}

// A token without variable rights gets *PermissionError naming the capability, which is
// also cluster.ErrPermissionDenied.
func TestPermissionError(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	tok := simtest.Token(t, c, "reader", `namespace "default" { capabilities = ["read-job"] }`)
	vars := nomadvars.New(simtest.ClientAs(t, c, tok), nomadvars.Options{})
	ctx := ctxT(t)
	_, err := vars.Write(ctx, &nomadvars.Variable{Path: "acl/a", Items: map[string]string{"k": "1"}})
	var perm *nomadvars.PermissionError
	if !errors.As(err, &perm) || perm.Capability != "write" || perm.Path != "acl/a" || perm.Namespace != "default" {
		t.Fatalf("write without rights: %v, want a PermissionError for write", err)
	}
	if !errors.Is(err, cluster.ErrPermissionDenied) {
		t.Errorf("%v does not match cluster.ErrPermissionDenied", err)
	}
	if _, err := vars.Read(ctx, "", "acl/a"); !errors.As(err, &perm) || perm.Capability != "read" {
		t.Fatalf("read without rights: %v, want a PermissionError for read", err)
	}
	if err := vars.DeleteAt(ctx, "", "acl/a", 5); !errors.As(err, &perm) || perm.Capability != "destroy" {
		t.Fatalf("delete without rights: %v, want a PermissionError for destroy", err)
	}
	want := `namespace "default" { variables { path "acl/*" { capabilities = ["read", "list", "write", "destroy"] } } }`
	if got := perm.Policy("acl"); got != want {
		t.Errorf("Policy = %s, want %s", got, want)
	}
}

// A prefix listing lists what is under the prefix only, in every namespace with "*"; a
// blocking one answers when a variable under it changes.
func TestListAndWait(t *testing.T) {
	c, vars := newClient(t)
	ctx := ctxT(t)
	if _, err := simtest.Client(t, c).Namespaces().Register(&api.Namespace{Name: "other"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, v := range []*nomadvars.Variable{
		{Path: "list/a", Items: map[string]string{"k": "1"}},
		{Path: "list/b/c", Items: map[string]string{"k": "1"}},
		{Path: "listing/x", Items: map[string]string{"k": "1"}},
		{Namespace: "other", Path: "list/d", Items: map[string]string{"k": "1"}},
	} {
		if _, err := vars.Write(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	metas, err := vars.List(ctx, "default", "list/")
	if err != nil || len(metas) != 2 {
		t.Fatalf("List in default: %d, %v; want 2", len(metas), err)
	}
	all, index, err := vars.ListAfter(ctx, "*", "list/", nomadvars.Wait{})
	if err != nil || len(all) != 3 || index == 0 {
		t.Fatalf("List in every namespace: %d, index %d, %v; want 3", len(all), index, err)
	}
	done := make(chan error, 1)
	go func() {
		metas, next, err := vars.Watching().ListAfter(ctx, "*", "list/", nomadvars.Wait{After: index, Time: 10 * time.Second})
		if err == nil && (len(metas) != 4 || next <= index) {
			err = errors.New("the blocking listing did not show the new variable")
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := vars.Write(ctx, &nomadvars.Variable{Path: "list/e", Items: map[string]string{"k": "1"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the blocking listing never answered")
	}
}

// InRegion sends every request, reads, listings and writes, to the region it names (and
// keeps it when Watching); a single-region cluster has no path to another.
func TestInRegion(t *testing.T) {
	c, vars := newClient(t)
	ctx := ctxT(t)
	home := vars.InRegion(c.Region())
	if _, err := home.Write(ctx, &nomadvars.Variable{Path: "region/a", Items: map[string]string{"k": "1"}}); err != nil {
		t.Fatalf("writing in the cluster's own region: %v", err)
	}
	if metas, err := home.Watching().List(ctx, "default", "region/"); err != nil || len(metas) != 1 {
		t.Fatalf("listing in the cluster's own region: %v, %v", metas, err)
	}
	away := vars.InRegion("elsewhere").Watching() // tried once: "No path to region" is a 500
	if _, err := away.List(ctx, "default", "region/"); err == nil || !strings.Contains(err.Error(), "No path to region") {
		t.Errorf("listing in another region: %v, want Nomad's No path to region", err)
	}
	if _, err := away.Read(ctx, "default", "region/a"); err == nil || !strings.Contains(err.Error(), "No path to region") {
		t.Errorf("reading in another region: %v, want Nomad's No path to region", err)
	}
	if err := away.Delete(ctx, "default", "region/a"); err == nil || !strings.Contains(err.Error(), "No path to region") {
		t.Errorf("deleting in another region: %v, want Nomad's No path to region", err)
	}
	if _, err := vars.Read(ctx, "default", "region/a"); err != nil {
		t.Errorf("InRegion changed the Client it came from: %v", err)
	}
}
