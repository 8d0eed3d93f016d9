package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

// Environment variables naming a real agent to check the suite against.
const (
	envAddr  = "NOMAD_CONFORMANCE_ADDR"
	envToken = "NOMAD_CONFORMANCE_TOKEN"
)

// simTimeScale makes the sim's seconds short: kill timeouts, min_healthy_time and check
// intervals of the cases then take a few tens of milliseconds of real time.
const simTimeScale = 20

// target is one Nomad to run a case against: the simulated cluster or a real agent.
type target struct {
	name  string // "sim" or "real"
	addr  string // base URL, like http://127.0.0.1:4646
	token string // a management token, or "" when ACLs are off
	acls  bool   // whether the target enforces ACLs
	api   *api.Client
	// http sends the raw requests. It does not ask for gzip, so that bodies compare as
	// text: the recorded exchanges were taken without compression (compress_test.go
	// compares what each target does when a client asks for it).
	http *http.Client
	sim  *nomadsim.Cluster // nil for a real agent
	// prefix makes the names of jobs and variables unique, so that cases can run against a
	// long-lived real agent again and again without meeting earlier runs' objects.
	prefix string
	// patience bounds every wait of a case: a real agent places and starts processes in
	// seconds, the sim in milliseconds.
	patience time.Duration
}

// now is the target's clock, the one its timestamps come from: the sim's scaled clock, or
// this machine's clock for a real agent on loopback.
func (tg *target) now() time.Time {
	if tg.sim != nil {
		return tg.sim.Now()
	}
	return time.Now()
}

// id returns a name unique to this run for an object of the case.
func (tg *target) id(name string) string { return tg.prefix + "-" + name }

// ctx returns a context bounded by the target's patience and the test's life.
func (tg *target) ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), tg.patience)
	t.Cleanup(cancel)
	return ctx
}

// targetOptions says what a case needs from its targets.
type targetOptions struct {
	acls bool // the case is about ACLs: the sim enforces them, a real agent must
}

// forEachTarget runs fn against a fresh simulated cluster, and against the real agent named
// by NOMAD_CONFORMANCE_ADDR when there is one (otherwise that subtest skips, saying why).
func forEachTarget(t *testing.T, opts targetOptions, fn func(t *testing.T, tg *target)) {
	t.Helper()
	t.Run("sim", func(t *testing.T) {
		t.Parallel()
		fn(t, simTarget(t, opts))
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		tg := realTarget(t, opts)
		fn(t, tg)
	})
}

// simTarget is a target on a fresh simulated cluster that ends with the test.
func simTarget(t *testing.T, opts targetOptions) *target {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{
		TimeScale:          simTimeScale,
		ACLs:               opts.acls,
		Datacenters:        []string{"dc1"},
		NodesPerDatacenter: 2,
	})
	tg := &target{name: "sim", addr: c.Addr(), acls: opts.acls, sim: c, prefix: "conf", patience: 30 * time.Second, http: rawClient(t)}
	if opts.acls {
		tg.token = c.BootstrapToken()
	}
	cl, err := c.APIClient(tg.token)
	if err != nil {
		t.Fatalf("nomadsim api client: %v", err)
	}
	tg.api = cl
	return tg
}

func realTarget(t *testing.T, opts targetOptions) *target {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skip(envAddr + " not set: no real Nomad agent to check this case against")
	}
	token := os.Getenv(envToken)
	if opts.acls && token == "" {
		t.Skip(envToken + " not set: the ACL cases need a real agent with ACLs enabled and its management token")
	}
	return &target{
		name: "real", addr: strings.TrimRight(addr, "/"), token: token, acls: token != "", api: testhttp.NomadClient(t, addr, token),
		prefix: "conf-" + randomHex(t, 4), patience: 90 * time.Second, http: rawClient(t),
	}
}

// rawClient is an HTTP client without compression, closed with the test.
func rawClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// rawResponse is an HTTP answer read whole.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

// do sends a raw request to the target with the given token ("" for none) and reads the
// whole answer. Used where the api client hides codes, texts or headers.
func (tg *target) do(t *testing.T, method, path, token string, body io.Reader) rawResponse {
	t.Helper()
	r, err := tg.request(tg.ctx(t), method, path, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// request is do for any goroutine: it reports failures instead of ending the test.
func (tg *target) request(ctx context.Context, method, path, token string, body io.Reader) (rawResponse, error) {
	return sendRaw(ctx, tg.http, method, tg.addr+path, body, map[string]string{"X-Nomad-Token": token})
}

// sendRaw sends a raw request with the headers whose values are not "" and reads the
// whole answer; it reports failures instead of ending the test.
func sendRaw(ctx context.Context, client *http.Client, method, url string, body io.Reader, header map[string]string) (rawResponse, error) {
	r, err := testhttp.Exchange(ctx, client, method, url, body, header)
	return rawResponse{status: r.Status, header: r.Header, body: r.Body}, err
}
