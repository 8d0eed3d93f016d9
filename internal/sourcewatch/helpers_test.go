package sourcewatch

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// testGap paces the tests' groups: short, so that a test's steps do not wait on it.
const testGap = 5 * time.Millisecond

// testContext ends with the test, or after a minute: the bound of every wait.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// inflight is an http.RoundTripper that tracks the blocking queries (?index=) an api client
// has open at once, and counts the listings of variables.
type inflight struct {
	next http.RoundTripper
	// fail, when set, answers a request instead of Nomad (nil: let it through).
	fail func(*http.Request) *http.Response

	mu       sync.Mutex
	blocking int
	peak     int
	lists    int
}

func (c *inflight) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	fail := c.fail
	if r.URL.Path == "/v1/vars" {
		c.lists++
	}
	c.mu.Unlock()
	if fail != nil {
		if resp := fail(r); resp != nil {
			return resp, nil
		}
	}
	blocking := r.Method == http.MethodGet && r.URL.Query().Get("index") != ""
	if !blocking {
		return c.next.RoundTrip(r)
	}
	c.mu.Lock()
	c.blocking++
	c.peak = max(c.peak, c.blocking)
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		c.done()
		return nil, err
	}
	resp.Body = &closeHook{ReadCloser: resp.Body, onClose: c.done}
	return resp, nil
}

func (c *inflight) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blocking--
}

func (c *inflight) snapshot() (blocking, peak, lists int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocking, c.peak, c.lists
}

func (c *inflight) setFail(f func(*http.Request) *http.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = f
}

type closeHook struct {
	io.ReadCloser
	once    sync.Once
	onClose func()
}

func (h *closeHook) Close() error {
	err := h.ReadCloser.Close()
	h.once.Do(h.onClose)
	return err
}

// trackedClient is an api client on the cluster, with token, whose requests go through
// an inflight.
func trackedClient(t *testing.T, c *nomadsim.Cluster, token string) (*api.Client, *inflight) {
	t.Helper()
	tr := &inflight{next: http.DefaultTransport}
	cfg := api.DefaultConfig()
	cfg.Address = c.Addr()
	cfg.Region, cfg.Namespace, cfg.SecretID = "", "", token
	cfg.HttpClient = &http.Client{Transport: tr}
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl, tr
}

// put writes a variable and returns it as Nomad stored it.
func put(t *testing.T, c *api.Client, path, value string) *api.Variable {
	t.Helper()
	v, _, err := c.Variables().Create(&api.Variable{Namespace: "default", Path: path, Items: map[string]string{"v": value}}, nil)
	if err != nil {
		t.Fatalf("writing variable %s: %v", path, err)
	}
	return v
}

func del(t *testing.T, c *api.Client, path string) {
	t.Helper()
	if _, err := c.Variables().Delete(path, &api.WriteOptions{Namespace: "default"}); err != nil {
		t.Fatalf("deleting variable %s: %v", path, err)
	}
}

func variable(path string) onchange.Source {
	return onchange.Source{Kind: onchange.NomadVariable, Path: path, Namespace: "default", Region: "global"}
}

func prefix(path string) onchange.Source {
	return onchange.Source{Kind: onchange.NomadPrefix, Path: path, Namespace: "default", Region: "global"}
}

// next receives the next State, failing the test when ctx ends or the channel closes.
func next(t *testing.T, ctx context.Context, what string, ch <-chan State) State {
	t.Helper()
	select {
	case st, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the channel closed", what)
		}
		return st
	case <-ctx.Done():
		t.Fatalf("%s: no State came", what)
		return State{}
	}
}

// until receives States until cond holds for one, and returns it.
func until(t *testing.T, ctx context.Context, what string, ch <-chan State, cond func(State) bool) State {
	t.Helper()
	for {
		if st := next(t, ctx, what, ch); cond(st) {
			return st
		}
	}
}

// nomadTime is a variable's ModifyTime as a time.
func nomadTime(v *api.Variable) time.Time { return time.Unix(0, v.ModifyTime) }

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
