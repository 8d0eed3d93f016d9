package nomadsim

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

// templated adds a template to the job's task "main" and returns it, for the caller to
// adjust; an empty changeMode leaves Nomad's default.
func templated(job *api.Job, dest, data, changeMode string) *api.Template {
	tmpl := &api.Template{DestPath: ptr(dest), EmbeddedTmpl: ptr(data)}
	if changeMode != "" {
		tmpl.ChangeMode = ptr(changeMode)
	}
	task := job.TaskGroups[0].Tasks[0]
	task.Templates = append(task.Templates, tmpl)
	return tmpl
}

// fsExchange sends a raw filesystem request (op "ls" or "stat") with token.
func fsExchange(t *testing.T, c *Cluster, op, allocID, path, token string) testhttp.Response {
	t.Helper()
	u := c.Addr() + "/v1/client/fs/" + op + "/" + allocID
	if path != "" {
		u += "?path=" + url.QueryEscape(path)
	}
	r, err := testhttp.Exchange(context.Background(), nil, "GET", u, nil, map[string]string{"X-Nomad-Token": token})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func names(infos []*api.AllocFileInfo) []string {
	var out []string
	for _, f := range infos {
		out = append(out, f.Name+" "+f.FileMode)
	}
	return out
}

func TestAllocFSLayout(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	templated(job, "local/config.txt", `{{ with nomadVar "nomad/jobs/web" }}{{ .a }}{{ end }}`, "noop")
	templated(job, "secrets/token", "x", "noop").Perms = ptr("0600")
	templated(job, "${NOMAD_ALLOC_DIR}/shared/app.json", "{}", "noop")
	a := runningAlloc(t, c, cl, job)
	fsc := cl.AllocFS()

	f, _, err := fsc.Stat(a, "main/local/config.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	started := a.TaskStates["main"].StartedAt
	if f.Name != "config.txt" || f.IsDir || f.Size <= 0 || f.FileMode != "-rw-r--r--" || f.ContentType != "text/plain; charset=utf-8" {
		t.Errorf("stat config.txt: %+v", f)
	}
	if !f.ModTime.Before(started) {
		t.Errorf("rendered at %v, not before the task started at %v", f.ModTime, started)
	}
	if f, _, err := fsc.Stat(a, "main/secrets/token", nil); err != nil || f.FileMode != "-rw-------" {
		t.Errorf("stat secrets/token: %+v %v", f, err)
	}
	if f, _, err := fsc.Stat(a, "alloc/shared/app.json", nil); err != nil || f.ContentType != "application/json" {
		t.Errorf("stat alloc/shared/app.json: %+v %v", f, err)
	}
	// secrets/ is a tmpfs: 20 bytes per entry with . and .. (seen on a real client).
	if d, _, err := fsc.Stat(a, "main/secrets", nil); err != nil || d.Size != 100 || !d.IsDir {
		t.Errorf("stat main/secrets: %+v %v", d, err)
	}
	root, _, err := fsc.Stat(a, "/", nil)
	if err != nil || root.Name != a.ID || !root.IsDir || root.FileMode != "drwxr-xr-x" || root.ContentType != "application/octet-stream" {
		t.Errorf("stat /: %+v %v", root, err)
	}

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"", []string{"alloc drwxrwxrwx", "main drwxrwxrwx"}},
		{"alloc", []string{"data drwxrwxrwx", "logs drwxrwxrwx", "shared drwxr-xr-x", "tmp drwxrwxrwx"}},
		{"main", []string{"local drwxrwxrwx", "private drwxrwxrwx", "secrets drwxrwxrwx", "tmp dtrwxrwxrwx"}},
		{"main/local", []string{"config.txt -rw-r--r--"}},
		{"main/secrets", []string{".nomad-mount -rw-r--r--", "api.sock Srw-rw-rw-", "token -rw-------"}},
		{"alloc/logs", []string{".main.stderr.fifo prw-------", ".main.stdout.fifo prw-------", "main.stderr.0 -rw-r--r--", "main.stdout.0 -rw-r--r--"}},
	} {
		list, _, err := fsc.List(a, tc.path, nil)
		if err != nil {
			t.Errorf("ls %q: %v", tc.path, err)
			continue
		}
		if got := names(list); !slices.Equal(got, tc.want) {
			t.Errorf("ls %q: %q, want %q", tc.path, got, tc.want)
		}
		for _, f := range list {
			if f.ContentType != "" {
				t.Errorf("ls %q: %s has content type %q; ls leaves it out", tc.path, f.Name, f.ContentType)
			}
		}
	}
	// The raw answers: JSON without blocking-query headers; ls leaves ContentType out.
	r := fsExchange(t, c, "stat", a.ID, "main/local/config.txt", "")
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Nomad-Index") != "" {
		t.Errorf("raw stat: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r := fsExchange(t, c, "ls", a.ID, "main/local", ""); r.Status != 200 || strings.Contains(string(r.Body), "ContentType") {
		t.Errorf("raw ls: %d %s", r.Status, r.Body)
	}
}

func TestAllocFSErrors(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	templated(job, "local/config.txt", "x", "noop")
	a := runningAlloc(t, c, cl, job)
	dir := "/opt/nomad/data/alloc/" + a.ID
	unknown := "0c167182-0c38-d4a7-de65-1e23946d2e45"
	for _, tc := range []struct {
		op, id, path string
		status       int
		body         string
	}{
		{"stat", a.ID, "", 400, "must provide a file name"},
		{"stat", "", "x", 400, "must provide a valid alloc id"},
		{"ls", "", "", 400, "must provide a valid alloc id"},
		{"stat", a.ID, "main/local/nope", 404, "stat " + dir + "/main/local/nope: no such file or directory"},
		{"ls", a.ID, "main/nope", 404, "open " + dir + "/main/nope: no such file or directory"},
		{"stat", a.ID, "main/local/config.txt/x", 500, "Failed to check if path escapes alloc directory: not a directory"},
		{"ls", a.ID, "main/local/config.txt/x", 500, "Failed to check if path escapes alloc directory: not a directory"},
		{"ls", a.ID, "main/local/config.txt", 500, "open " + dir + "/main/local/config.txt: not a directory"},
		{"stat", a.ID, "../x", 500, "Path escapes the alloc directory"},
		{"ls", a.ID, "main/../../..", 500, "Path escapes the alloc directory"},
		{"stat", a.ID, "..x", 500, "Path escapes the alloc directory"},
		{"stat", unknown, "x", 404, `Unknown allocation "` + unknown + `"`},
		{"ls", "short", "", 500, "alloc lookup failed: index error: UUID must be 36 characters"},
		{"cat2", a.ID, "x", 404, "Invalid method"},
	} {
		r := fsExchange(t, c, tc.op, tc.id, tc.path, "")
		if r.Status != tc.status || string(r.Body) != tc.body {
			t.Errorf("%s %s?path=%s: %d %q, want %d %q", tc.op, tc.id, tc.path, r.Status, r.Body, tc.status, tc.body)
		}
	}
	// Through the api client: the error carries code and text.
	_, _, err := cl.AllocFS().Stat(a, "main/local/nope", nil)
	if err == nil || !isCode(err, 404) {
		t.Errorf("api stat of a missing file: %v", err)
	}
}

func isCode(err error, code int) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == code
}

func TestAllocFSACL(t *testing.T) {
	c, cl := startCluster(t, Options{ACLs: true})
	job := serviceJob("web", 1)
	templated(job, "local/config.txt", "x", "noop")
	a := runningAlloc(t, c, cl, job)
	reader, err := c.CreateToken("reader", map[string]string{"reader": `namespace "default" { policy = "read" }`})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := c.CreateToken("writer", map[string]string{"writer": `namespace "default" { policy = "write" }`})
	if err != nil {
		t.Fatal(err)
	}
	fsReader, err := c.CreateToken("fs", map[string]string{"fs": `namespace "default" { capabilities = ["read-fs"] }`})
	if err != nil {
		t.Fatal(err)
	}
	unknownAlloc := "0c167182-0c38-d4a7-de65-1e23946d2e45"
	for _, tc := range []struct {
		what, token, id string
		status          int
		body            string
	}{
		{"no token", "", a.ID, 403, "Permission denied"},
		{"unknown token", "00000000-0000-0000-0000-000000000001", a.ID, 403, "Permission denied"},
		{"read policy", reader, a.ID, 403, "Permission denied"},
		{"read policy, unknown allocation", reader, unknownAlloc, 404, `Unknown allocation "` + unknownAlloc + `"`},
		{"write policy", writer, a.ID, 200, ""},
		{"read-fs", fsReader, a.ID, 200, ""},
		{"management", c.BootstrapToken(), a.ID, 200, ""},
	} {
		for _, op := range []string{"stat", "ls"} {
			r := fsExchange(t, c, op, tc.id, "main/secrets", tc.token)
			if r.Status != tc.status || (tc.body != "" && string(r.Body) != tc.body) {
				t.Errorf("%s: %s: %d %q, want %d %q", tc.what, op, r.Status, r.Body, tc.status, tc.body)
			}
		}
	}
}

// An allocation its client has not picked up is unknown to the client; a stopped one keeps
// its directory.
func TestAllocFSLifecycle(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	templated(job, "local/config.txt", "x", "noop")
	a := runningAlloc(t, c, cl, job)
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "allocation stopped", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.ClientStatus == "complete"
	})
	if f, _, err := cl.AllocFS().Stat(a, "main/local/config.txt", nil); err != nil || f.Size == 0 {
		t.Errorf("stat after the stop: %+v %v", f, err)
	}
	// The task API socket goes with the task.
	list, _, err := cl.AllocFS().List(a, "main/secrets", nil)
	if err != nil || !slices.Equal(names(list), []string{".nomad-mount -rw-r--r--"}) {
		t.Errorf("secrets after the stop: %q %v", names(list), err)
	}
}
