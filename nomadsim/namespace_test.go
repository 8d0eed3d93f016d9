package nomadsim

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestNamespaceRegister(t *testing.T) {
	c, cl := startCluster(t, Options{})
	if _, err := cl.Namespaces().Register(&api.Namespace{Name: "team-a", Description: "A"}, nil); err != nil {
		t.Fatalf("register: %v", err)
	}
	ns, _, err := cl.Namespaces().Info("team-a", nil)
	if err != nil || ns.Description != "A" {
		t.Fatalf("info: %+v, %v", ns, err)
	}
	cases := []struct {
		method, path, body string
		code               int
		text               string
	}{
		{"GET", "/v1/namespace", "", http.StatusMethodNotAllowed, "Invalid method"},
		{"PUT", "/v1/namespace/team-b", `{"Name":"other"}`, http.StatusBadRequest, "Namespace name does not match request path"},
		{"PUT", "/v1/namespace", `{"Name":"bad name"}`, http.StatusInternalServerError, `Invalid namespace "bad name"`},
		{"PUT", "/v1/namespace/team-b", `{"Name":"team-b"}`, http.StatusOK, ""},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, c.Addr()+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(b.String(), tc.text) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, resp.StatusCode, b.String(), tc.code, tc.text)
		}
	}
}

// TestRestartMalformedAllocID: Nomad looks the ID up in a UUID index, so an ID that is
// not 36 characters long is a 500, not a 404.
func TestRestartMalformedAllocID(t *testing.T) {
	c, _ := startCluster(t, Options{})
	req, _ := http.NewRequest("PUT", c.Addr()+"/v1/client/allocation/abc/restart", strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := resp.Body.Read(buf)
	resp.Body.Close()
	if want := "alloc lookup failed: index error: UUID must be 36 characters"; resp.StatusCode != 500 || !strings.Contains(string(buf[:n]), want) {
		t.Errorf("restart of alloc abc: %d %q, want 500 %q", resp.StatusCode, buf[:n], want)
	}
}
