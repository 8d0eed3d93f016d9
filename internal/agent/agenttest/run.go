package agenttest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Runner is what Run runs: an agent (internal/agent's *Agent).
type Runner interface {
	Run(ctx context.Context) error
	Holder() string
}

// Run runs a in the background; the returned stop cancels it and waits for Run to return
// (the streams of its page end then), reporting an error it returned. The test's end
// stops it too.
func Run(t testing.TB, a Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent %s: Run: %v", a.Holder(), err)
			}
		case <-time.After(Timeout):
			t.Errorf("agent %s did not stop", a.Holder())
		}
	})
	t.Cleanup(stop)
	return stop
}

// Get reads url, which must answer code, and returns the body.
func Get(t testing.TB, url string, code int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(Context(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, body, err := do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if got != code {
		t.Fatalf("GET %s: %d, want %d: %s", url, got, code, body)
	}
	return body
}

// Post sends body to url as the page's script does (JSON), with the extra headers, and
// returns the status and the body of the answer.
func Post(t testing.TB, url string, headers map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(Context(t), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	code, answer, err := do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return code, answer
}

func do(req *http.Request) (int, string, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// PutVar writes the variable at path of namespace default, its item "greeting" set to
// value, with check-and-set at index (0: create), and returns its new ModifyIndex.
func PutVar(t testing.TB, client *api.Client, path, value string, index uint64) uint64 {
	t.Helper()
	v := &api.Variable{Namespace: "default", Path: path, Items: map[string]string{"greeting": value}, ModifyIndex: index}
	var out *api.Variable
	var err error
	if index == 0 {
		out, _, err = client.Variables().CheckedCreate(v, nil)
	} else {
		out, _, err = client.Variables().CheckedUpdate(v, nil)
	}
	if err != nil {
		t.Fatalf("writing variable %s: %v", path, err)
	}
	return out.ModifyIndex
}

// GreetingTemplate is a template that renders the "greeting" of the variable at path.
func GreetingTemplate(path string) string {
	return `{{ with nomadVar "` + path + `" }}{{ .greeting }}{{ end }}`
}

// Templated adds to the job's first task a template of tmpl rendered with change_mode noop
// (the job is restarted by config-change rollouts, not by Nomad), and sets the job's meta.
func Templated(job *api.Job, tmpl string, meta map[string]string) *api.Job {
	job.Meta = meta
	job.TaskGroups[0].Tasks[0].Templates = []*api.Template{{EmbeddedTmpl: &tmpl, DestPath: new("local/config.txt"), ChangeMode: new("noop")}}
	return job
}
