package variables

import (
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func put(t *testing.T, c *api.Client, namespace, path string) *api.Variable {
	t.Helper()
	v, _, err := c.Variables().Create(&api.Variable{Path: path, Items: api.VariableItems{"k": "v"}}, &api.WriteOptions{Namespace: namespace})
	if err != nil {
		t.Fatalf("create %s/%s: %v", namespace, path, err)
	}
	return v
}

func TestListByPrefixAcrossNamespaces(t *testing.T) {
	e := newEnv(t, false)
	put(t, e.client, "default", "nomad-restart/web/1")
	put(t, e.client, "default", "nomad-restart/api/2")
	put(t, e.client, "default", "other/x")
	last := put(t, e.client, "prod", "nomad-restart/web/3")

	tests := []struct {
		name, namespace, prefix string
		want                    []string
	}{
		{"prefix in default", "default", "nomad-restart/", []string{"default/nomad-restart/api/2", "default/nomad-restart/web/1"}},
		{"all in default", "default", "", []string{"default/nomad-restart/api/2", "default/nomad-restart/web/1", "default/other/x"}},
		{"prefix in prod", "prod", "nomad-restart", []string{"prod/nomad-restart/web/3"}},
		{"prefix everywhere", "*", "nomad-restart/web", []string{"default/nomad-restart/web/1", "prod/nomad-restart/web/3"}},
		{"nothing", "prod", "zzz", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list, qm, err := e.client.Variables().PrefixList(tc.prefix, &api.QueryOptions{Namespace: tc.namespace})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range list {
				got = append(got, m.Namespace+"/"+m.Path)
			}
			sort.Strings(got)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
			if qm.LastIndex != last.ModifyIndex {
				t.Fatalf("list index %d, want the table's %d", qm.LastIndex, last.ModifyIndex)
			}
		})
	}

	raw := e.do(t, http.MethodGet, "/v1/vars?prefix=zzz", "", "")
	if raw.status != http.StatusOK || raw.body != "[]\n" {
		t.Fatalf("empty list should be []: %d %q", raw.status, raw.body)
	}
	raw = e.do(t, http.MethodGet, "/v1/vars?namespace=*&per_page=2", "", "")
	if raw.header.Get("X-Nomad-NextToken") != "default.other/x" {
		t.Fatalf("next token %q", raw.header.Get("X-Nomad-NextToken"))
	}
	raw = e.do(t, http.MethodGet, "/v1/vars?namespace=*&next_token=default.other/x", "", "")
	if !containsAll(raw.body, "other/x", "web/3") || containsAll(raw.body, "api/2") {
		t.Fatalf("second page: %s", raw.body)
	}
	raw = e.do(t, http.MethodGet, `/v1/vars?namespace=*&filter=Namespace+%3D%3D+"prod"`, "", "")
	if !containsAll(raw.body, "web/3") || containsAll(raw.body, "web/1") {
		t.Fatalf("filtered: %d %s", raw.status, raw.body)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		found := false
		for i := 0; i+len(x) <= len(s); i++ {
			if s[i:i+len(x)] == x {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestBlockingReadOfAVariable(t *testing.T) {
	e := newEnv(t, false)
	v := put(t, e.client, "default", "w/x")

	t.Run("fires on a write", func(t *testing.T) {
		type result struct {
			v   *api.Variable
			qm  *api.QueryMeta
			err error
		}
		done := make(chan result, 1)
		go func() {
			got, qm, err := e.client.Variables().Read("w/x", &api.QueryOptions{WaitIndex: v.ModifyIndex, WaitTime: time.Minute})
			done <- result{got, qm, err}
		}()
		// Writes elsewhere wake the query but do not answer it: the variable's index is
		// unchanged.
		put(t, e.client, "default", "w/other")
		select {
		case r := <-done:
			t.Fatalf("answered before the variable changed: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
		upd := *v
		upd.Items = api.VariableItems{"k": "v2"}
		w, _, err := e.client.Variables().Update(&upd, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.v.Items["k"] != "v2" || r.qm.LastIndex != w.ModifyIndex {
			t.Fatalf("blocking read: %+v %+v %v", r.v, r.qm, r.err)
		}
	})
	t.Run("times out with the same index", func(t *testing.T) {
		cur, _, err := e.client.Variables().Read("w/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		raw := e.do(t, http.MethodGet, "/v1/var/w/x?index="+strconv.FormatUint(cur.ModifyIndex, 10)+"&wait=30ms", "", "")
		if raw.status != http.StatusOK || raw.header.Get("X-Nomad-Index") != strconv.FormatUint(cur.ModifyIndex, 10) {
			t.Fatalf("timeout: %d index %q", raw.status, raw.header.Get("X-Nomad-Index"))
		}
	})
	t.Run("a missing variable answers when created", func(t *testing.T) {
		done := make(chan rawResponse, 1)
		idx := e.idx.Current()
		go func() {
			done <- e.do(t, http.MethodGet, "/v1/var/w/later?index="+strconv.FormatUint(idx, 10)+"&wait=1m", "", "")
		}()
		put(t, e.client, "default", "w/later")
		if raw := <-done; raw.status != http.StatusOK {
			t.Fatalf("blocking read of a new variable: %d %s", raw.status, raw.body)
		}
	})
}
