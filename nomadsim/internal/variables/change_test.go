package variables

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

// OnChange hears of creations, deletions and new items, not of writes that leave what a
// reader sees as it was.
func TestOnChange(t *testing.T) {
	var mu sync.Mutex
	var got []Change
	idx := index.New(1)
	st := New(Config{Index: idx, Now: time.Now, ACL: acl.New(false, idx), OnChange: func(c Change) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, c)
	}})
	t.Cleanup(st.Close)
	set := func(items map[string]string) applyResult {
		return st.apply(applyArgs{op: opSet, namespace: "default", path: "a/b", items: items})
	}
	set(map[string]string{"k": "1"})
	set(map[string]string{"k": "1"}) // same items: no change
	set(map[string]string{"k": "2"})
	lk := &lock{ID: "l1", TTL: 15 * time.Second, LockDelay: 15 * time.Second}
	st.apply(applyArgs{op: opLockAcquire, namespace: "default", path: "a/b", items: map[string]string{"k": "2"}, lock: lk})
	st.apply(applyArgs{op: opLockRelease, namespace: "default", path: "a/b", lock: lk})
	st.apply(applyArgs{op: opCAS, namespace: "default", path: "a/b", items: map[string]string{"k": "3"}, checkIndex: 1}) // conflict
	st.apply(applyArgs{op: opDelete, namespace: "default", path: "a/b"})
	st.apply(applyArgs{op: opDelete, namespace: "default", path: "a/b"}) // already gone
	want := []Change{
		{Namespace: "default", Path: "a/b", Created: true},
		{Namespace: "default", Path: "a/b"},
		{Namespace: "default", Path: "a/b", Deleted: true},
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("changes %+v, want %+v", got, want)
	}
}
