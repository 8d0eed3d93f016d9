package variables

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestCreateAndReadMatchNomad(t *testing.T) {
	e := newEnv(t, false)
	v, wm, err := e.client.Variables().Create(&api.Variable{Path: "nomad-restart/demo", Items: api.VariableItems{"k": "v1"}}, nil)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if v.CreateIndex == 0 || v.ModifyIndex != v.CreateIndex || wm.LastIndex != v.ModifyIndex {
		t.Fatalf("indexes: create %d modify %d header %d", v.CreateIndex, v.ModifyIndex, wm.LastIndex)
	}
	if v.Namespace != "default" || v.CreateTime == 0 || v.ModifyTime != v.CreateTime {
		t.Fatalf("metadata: %+v", v)
	}
	got, qm, err := e.client.Variables().Read("nomad-restart/demo", nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got.Items["k"] != "v1" || got.ModifyIndex != v.ModifyIndex || qm.LastIndex != v.ModifyIndex || !qm.KnownLeader {
		t.Fatalf("read: %+v meta %+v", got, qm)
	}

	raw := e.do(t, http.MethodGet, "/v1/var/nomad-restart/nosuch", "", "")
	if raw.status != http.StatusNotFound || raw.body != "variable not found" {
		t.Fatalf("unknown: %d %q", raw.status, raw.body)
	}
	if raw.header.Get("X-Nomad-Index") != strconv.FormatUint(v.ModifyIndex, 10) {
		t.Fatalf("unknown variable index %q, want the table's %d", raw.header.Get("X-Nomad-Index"), v.ModifyIndex)
	}
	if _, _, err := e.client.Variables().Read("nomad-restart/nosuch", nil); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Fatalf("client read of unknown: %v", err)
	}
}

func TestCheckAndSet(t *testing.T) {
	e := newEnv(t, false)
	vars := e.client.Variables()
	first, _, err := vars.Create(&api.Variable{Path: "a/b", Items: api.VariableItems{"k": "v1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		path         string
		cas          uint64
		wantConflict bool
		// wantBodyIndex is the ModifyIndex the conflict body carries (0: the zero variable).
		wantBodyIndex uint64
	}{
		{name: "create-only on existing", path: "a/b", cas: 0, wantConflict: true, wantBodyIndex: first.ModifyIndex},
		{name: "stale index", path: "a/b", cas: 1, wantConflict: true, wantBodyIndex: first.ModifyIndex},
		{name: "index on missing", path: "a/none", cas: 5, wantConflict: true, wantBodyIndex: 0},
		{name: "create-only on missing", path: "a/new", cas: 0},
		{name: "fresh index", path: "a/b", cas: first.ModifyIndex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.idx.Current()
			raw := e.do(t, http.MethodPut, fmt.Sprintf("/v1/var/%s?cas=%d", tc.path, tc.cas), `{"Items":{"k":"v2"}}`, "")
			if after := e.idx.Current(); after != before+1 {
				t.Fatalf("a write, conflict or not, takes one index: %d -> %d", before, after)
			}
			var body varJSON
			if err := json.Unmarshal([]byte(raw.body), &body); err != nil {
				t.Fatalf("body %q: %v", raw.body, err)
			}
			if tc.wantConflict {
				if raw.status != http.StatusConflict {
					t.Fatalf("status %d, want 409", raw.status)
				}
				if ct := raw.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
					t.Fatalf("conflict content type %q", ct)
				}
				if body.ModifyIndex != tc.wantBodyIndex || raw.header.Get("X-Nomad-Index") != strconv.FormatUint(tc.wantBodyIndex, 10) {
					t.Fatalf("conflict body index %d header %q, want %d", body.ModifyIndex, raw.header.Get("X-Nomad-Index"), tc.wantBodyIndex)
				}
				if tc.wantBodyIndex != 0 && body.Items["k"] != "v1" {
					t.Fatalf("conflict body should be the current variable: %+v", body)
				}
				if tc.wantBodyIndex == 0 && (body.Items != nil || body.Path != tc.path) {
					t.Fatalf("zero conflict: %+v", body)
				}
				return
			}
			if raw.status != http.StatusOK || body.Items["k"] != "v2" || body.ModifyIndex != before+1 {
				t.Fatalf("write: %d %+v", raw.status, body)
			}
			if raw.header.Get("X-Nomad-Index") != strconv.FormatUint(before+1, 10) {
				t.Fatalf("write index header %q", raw.header.Get("X-Nomad-Index"))
			}
		})
	}

	// The client's checked calls see the same conflicts.
	cur, _, err := vars.Read("a/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := *cur
	stale.ModifyIndex = first.ModifyIndex
	_, _, err = vars.CheckedUpdate(&stale, nil)
	var conflict api.ErrCASConflict
	if !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex != cur.ModifyIndex {
		t.Fatalf("checked update with a stale index: %v", err)
	}
	if _, _, err := vars.CheckedUpdate(cur, nil); err != nil {
		t.Fatalf("checked update with the current index: %v", err)
	}
}

func TestDeleteWithCAS(t *testing.T) {
	e := newEnv(t, false)
	v, _, err := e.client.Variables().Create(&api.Variable{Path: "d/x", Items: api.VariableItems{"k": "v"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		path       string
		cas        string
		wantStatus int
	}{
		{"stale", "d/x", "?cas=1", http.StatusConflict},
		{"create-only index on existing", "d/x", "?cas=0", http.StatusConflict},
		{"missing with index 0", "d/none", "?cas=0", http.StatusNoContent},
		{"missing with an index", "d/none", "?cas=9", http.StatusConflict},
		{"current", "d/x", fmt.Sprintf("?cas=%d", v.ModifyIndex), http.StatusNoContent},
		{"gone, no cas", "d/x", "", http.StatusNoContent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := e.do(t, http.MethodDelete, "/v1/var/"+tc.path+tc.cas, "", "")
			if raw.status != tc.wantStatus {
				t.Fatalf("status %d, want %d (%s)", raw.status, tc.wantStatus, raw.body)
			}
			if raw.status == http.StatusNoContent && (raw.body != "" || raw.header.Get("X-Nomad-Index") != strconv.FormatUint(e.idx.Current(), 10)) {
				t.Fatalf("204: body %q index %q", raw.body, raw.header.Get("X-Nomad-Index"))
			}
		})
	}
	if _, _, err := e.client.Variables().Read("d/x", nil); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	// The client's checked delete unwraps the conflict.
	v2, _, err := e.client.Variables().Create(&api.Variable{Path: "d/y", Items: api.VariableItems{"k": "v"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var conflict api.ErrCASConflict
	if _, err := e.client.Variables().CheckedDelete("d/y", 1, nil); !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex != v2.ModifyIndex {
		t.Fatalf("checked delete stale: %v", err)
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t, false)
	big := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'x'
		}
		return string(b)
	}
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantBody   string
	}{
		{"size at the limit", "PUT", "/v1/var/s/ok", fmt.Sprintf(`{"Items":{"k":%q}}`, big(MaxItemsSize-1)), 200, ""},
		{"size over the limit", "PUT", "/v1/var/s/big", fmt.Sprintf(`{"Items":{"k":%q}}`, big(MaxItemsSize)), 400,
			"RPC Error:: 400,variables are limited to 64KiB in total size"},
		{"no items", "PUT", "/v1/var/s/x", `{"Items":{}}`, 400, "variable missing required Items object"},
		{"reserved nomad", "PUT", "/v1/var/nomad", `{"Items":{"a":"b"}}`, 400,
			`RPC Error:: 400,"nomad" is a reserved top-level directory path, but you may write variables to "nomad/jobs", "nomad/job-templates", "nomad/sentinel", or below`},
		{"nomad other", "PUT", "/v1/var/nomad/other", `{"Items":{"a":"b"}}`, 400,
			`RPC Error:: 400,only paths at "nomad/jobs" or "nomad/job-templates" and below are valid paths under the top-level "nomad" directory`},
		{"nomad jobs", "PUT", "/v1/var/nomad/jobs/web", `{"Items":{"a":"b"}}`, 200, ""},
		{"bad character", "PUT", "/v1/var/a.b", `{"Items":{"a":"b"}}`, 400, `RPC Error:: 400,invalid path "a.b"`},
		{"lock on a plain write", "PUT", "/v1/var/s/l", `{"Items":{"a":"b"},"Lock":{"TTL":"15s"}}`, 400,
			"RPC Error:: 400,RPC Error:: 400,variable should not contain lock definition"},
		{"cas with a lock operation", "PUT", "/v1/var/s/l?cas=0&lock-acquire", `{}`, 400, "CAS can't be used with lock operations"},
		{"two lock operations", "PUT", "/v1/var/s/l?lock-acquire&lock-release", `{}`, 400, "multiple lock operations"},
		{"bad cas", "PUT", "/v1/var/s/l?cas=x", `{"Items":{"a":"b"}}`, 400, `can not parse cas: strconv.ParseUint: parsing "x": invalid syntax`},
		{"lock ttl too short", "PUT", "/v1/var/s/l?lock-acquire", `{"Lock":{"TTL":"5s"}}`, 400,
			"RPC Error:: 400,1 error occurred:\n\t* TTL must be between 10 seconds and 24 hours\n\n"},
		{"release without lock", "PUT", "/v1/var/s/l?lock-release", `{}`, 400, "RPC Error:: 400,missing lock information"},
		{"release with items", "PUT", "/v1/var/s/l?lock-release", `{"Lock":{"ID":"x"},"Items":{"a":"b"}}`, 400,
			"RPC Error:: 400,lock release operation doesn't take variable items"},
		{"release of missing variable", "PUT", "/v1/var/s/none?lock-release", `{"Lock":{"ID":"x"}}`, 500, "variable doesn't exist"},
		{"release of unlocked variable", "PUT", "/v1/var/s/ok?lock-release", `{"Lock":{"ID":"x"}}`, 500, "variable doesn't hold a lock"},
		{"renew of missing variable", "PUT", "/v1/var/s/none?lock-renew", `{"Lock":{"ID":"x"}}`, 404, "variable doesn't exist"},
		{"renew of unlocked variable", "PUT", "/v1/var/s/ok?lock-renew", `{"Lock":{"ID":"x"}}`, 409, "variable doesn't hold a lock"},
		{"missing path", "GET", "/v1/var/", "", 400, "missing variable path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := e.do(t, tc.method, tc.path, tc.body, "")
			if raw.status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %q", raw.status, tc.wantStatus, raw.body)
			}
			if tc.wantBody != "" && raw.body != tc.wantBody {
				t.Fatalf("body %q, want %q", raw.body, tc.wantBody)
			}
		})
	}
}
