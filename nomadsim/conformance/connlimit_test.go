package conformance

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// nomadConnLimit is the default of Nomad's limits.http_max_conns_per_client, which the
// real agent runs with; the sim of these cases is given the same.
const nomadConnLimit = 100

// tooManyConns is Nomad's whole answer to a connection over the limit, written before any
// request is read, then the connection is closed.
const (
	tooManyConnsMsg = "Your IP is issuing too many concurrent connections, please rate limit your calls"
	tooManyConns    = "HTTP/1.1 429 Too Many Requests\r\n" +
		"Content-Type: text/plain\r\n" +
		"Content-Length: 81\r\n" +
		"Connection: close\r\n\r\n" +
		tooManyConnsMsg + "\n"
)

// TestConnLimitPerClient holds 100 blocking queries from one client address; the 101st
// connection from it is refused with Nomad's 429, another address is still served, the
// connections still count once idle in the client's pool, and the slots come back once the
// client closes them.
func TestConnLimitPerClient(t *testing.T) {
	forEachLimitedTarget(t, func(t *testing.T, tg *target, cc *connClient) {
		ctx := tg.ctx(t)
		hold := cc.holdQueries(ctx, t, tg, 2*time.Second)

		// The 101st connection, dialed after the others were established (the agent accepts
		// in order), is answered at once, before it sends anything, and closed.
		if got := cc.refusal(ctx, t); got != tooManyConns {
			t.Errorf("101st connection got\n%q\nwant\n%q", got, tooManyConns)
		}

		// The official client from the same address fails. Its request races the answer: it
		// reads the 429, or (when the answer came first) Go's transport drops it as
		// unsolicited and reports the closed connection.
		over := cc.apiClient(t, tg)
		if _, _, err := over.Jobs().List(nil); err == nil {
			t.Errorf("a request from the client address holding %d connections succeeded", nomadConnLimit)
		} else if msg := err.Error(); strings.Contains(msg, "429") && !strings.Contains(msg, tooManyConnsMsg) {
			t.Errorf("429 without Nomad's message: %v", err)
		} else {
			t.Logf("over the limit, the api client got: %v", err)
		}

		// The limit is per address: the case's usual client (127.0.0.1) is served meanwhile.
		if _, _, err := tg.api.Jobs().List(nil); err != nil {
			t.Errorf("a request from another address while %d are held: %v", nomadConnLimit, err)
		}

		// The queries end; their connections idle in the client's pool and still count.
		for _, f := range hold.wait() {
			t.Errorf("one of the %d blocking queries: %s", nomadConnLimit, f)
		}
		if got := cc.refusal(ctx, t); got != tooManyConns {
			t.Errorf("with %d idle keep-alive connections held, a new connection got %q, want the 429", nomadConnLimit, got)
		}

		// Once the client closes them, the address is served again.
		cc.closeIdle()
		cc.waitServed(ctx, t, over)
		if tg.sim != nil {
			if s := tg.sim.ConnStats(); s.PeakPerClient != nomadConnLimit || s.Refused < 3 {
				t.Errorf("sim connection stats %+v: want a peak of %d and at least 3 refusals", s, nomadConnLimit)
			}
		}
	})
}

// TestConnLimitCanceledQueriesHoldTheirSlots: a blocking query the client gives up on keeps
// its connection open on the agent, counted against the limit, until its wait ends (the
// agent's handlers run their RPC without the request's context). A client that cancels
// blocking queries and opens new ones can thus be refused while it holds far fewer than
// the limit itself.
func TestConnLimitCanceledQueriesHoldTheirSlots(t *testing.T) {
	forEachLimitedTarget(t, func(t *testing.T, tg *target, cc *connClient) {
		ctx := tg.ctx(t)
		qctx, cancel := context.WithCancel(ctx)
		hold := cc.holdQueries(qctx, t, tg, 5*time.Second)
		cancel()
		for _, f := range hold.wait() {
			if !strings.Contains(f, context.Canceled.Error()) {
				t.Errorf("blocking query: %s, want it canceled", f)
			}
		}
		cc.closeIdle() // nothing is left on the client's side
		// Were the agent to end its handlers with the connections, it would see the closes
		// well within this; the queries' waits end seconds later.
		time.Sleep(200 * time.Millisecond)
		if got := cc.refusal(ctx, t); got != tooManyConns {
			t.Errorf("after the client canceled its %d blocking queries and closed their connections, a new connection got %q, want the 429", nomadConnLimit, got)
		}
		// The slots come back when the waits end.
		cc.waitServed(ctx, t, cc.apiClient(t, tg))
	})
}

// forEachLimitedTarget runs fn against a sim with Nomad's default connection limit and
// against the real agent (which runs with that default), each with a client of its own.
//
// The client's connections come from an address of their own on the loopback network
// (127.x.y.z), so that the idle keep-alive connections other cases leave in their clients'
// pools (which count against the limit too) cannot shift the counts. A real agent must
// therefore be on loopback.
func forEachLimitedTarget(t *testing.T, fn func(t *testing.T, tg *target, cc *connClient)) {
	t.Helper()
	t.Run("sim", func(t *testing.T) {
		t.Parallel()
		c := simtest.Start(t, nomadsim.Options{
			TimeScale: simTimeScale, Datacenters: []string{"dc1"}, NodesPerDatacenter: 1,
			MaxConnsPerClient: nomadConnLimit,
		})
		tg := &target{name: "sim", addr: c.Addr(), api: simtest.Client(t, c), sim: c, patience: 30 * time.Second, http: rawClient(t)}
		fn(t, tg, newConnClient(t, tg))
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		tg := realTarget(t, targetOptions{})
		fn(t, tg, newConnClient(t, tg))
	})
}

// connClient is one client address's connections to a target.
type connClient struct {
	host   string // host:port of the target
	dialer *net.Dialer
	tr     *http.Transport // keeps every connection it opened
	hc     *http.Client
}

func newConnClient(t *testing.T, tg *target) *connClient {
	t.Helper()
	u, err := url.Parse(tg.addr)
	if err != nil {
		t.Fatalf("target address %q: %v", tg.addr, err)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Skipf("target %s is not on loopback: the case needs a client address of its own", tg.addr)
	}
	src := &net.TCPAddr{IP: net.IPv4(127, byte(1+rand.IntN(250)), byte(rand.IntN(256)), byte(1+rand.IntN(250)))}
	cc := &connClient{host: u.Host, dialer: &net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}}
	cc.tr = &http.Transport{DialContext: cc.dialer.DialContext, MaxIdleConnsPerHost: 2 * nomadConnLimit, DisableCompression: true}
	cc.hc = &http.Client{Transport: cc.tr}
	t.Cleanup(cc.closeIdle)
	return cc
}

func (cc *connClient) closeIdle() { cc.tr.CloseIdleConnections() }

// apiClient is an official client on the same address, with a pool of its own.
func (cc *connClient) apiClient(t *testing.T, tg *target) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = tg.addr
	cfg.SecretID = tg.token
	tr := &http.Transport{DialContext: cc.dialer.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.HttpClient = &http.Client{Transport: tr}
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// refusal dials one more connection, sends nothing, and returns all it receives up to the
// agent's close.
func (cc *connClient) refusal(ctx context.Context, t *testing.T) string {
	t.Helper()
	conn, err := cc.dialer.DialContext(ctx, "tcp", cc.host)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Errorf("reading a connection over the limit: %v after %q, want the agent's answer then its close", err, got)
	}
	return string(got)
}

// waitServed waits until the client is served again: the agent frees a slot once it has
// seen the connection close, a moment after the client closed it.
func (cc *connClient) waitServed(ctx context.Context, t *testing.T, cl *api.Client) {
	t.Helper()
	for {
		_, _, err := cl.Jobs().List(nil)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the address is still refused: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// heldQueries are blocking queries in flight.
type heldQueries struct {
	wg       sync.WaitGroup
	failures chan string
}

// wait waits for the queries to end and returns their failures.
func (h *heldQueries) wait() []string {
	h.wg.Wait()
	close(h.failures)
	var out []string
	for f := range h.failures {
		out = append(out, f)
	}
	return out
}

// holdQueries sends nomadConnLimit blocking queries that nothing wakes, each on a
// connection of its own, and returns once all are on the wire (their connections
// established, in the agent's accept queue or accepted).
func (cc *connClient) holdQueries(ctx context.Context, t *testing.T, tg *target, wait time.Duration) *heldQueries {
	t.Helper()
	// An index far ahead that nothing reaches: each query waits out its wait. (A real agent
	// without jobs answers X-Nomad-Index 0 here.)
	first := tg.do(t, "GET", "/v1/jobs", tg.token, nil)
	index, err := strconv.ParseUint(first.header.Get("X-Nomad-Index"), 10, 64)
	if err != nil {
		t.Fatalf("GET /v1/jobs: X-Nomad-Index %q: %v", first.header.Get("X-Nomad-Index"), err)
	}
	path := fmt.Sprintf("%s/v1/jobs?index=%d&wait=%s", tg.addr, index+1_000_000, wait)
	h := &heldQueries{failures: make(chan string, nomadConnLimit)}
	var written atomic.Int32
	allWritten := make(chan struct{})
	for range nomadConnLimit {
		h.wg.Go(func() {
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
				if written.Add(1) == nomadConnLimit {
					close(allWritten)
				}
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", path, nil)
			if tg.token != "" {
				req.Header.Set("X-Nomad-Token", tg.token)
			}
			resp, err := cc.hc.Do(req)
			if err != nil {
				h.failures <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				h.failures <- fmt.Sprintf("%d %q", resp.StatusCode, b)
			}
		})
	}
	select {
	case <-allWritten:
	case <-ctx.Done():
		t.Fatalf("only %d of %d blocking queries sent: %v", written.Load(), nomadConnLimit, ctx.Err())
	}
	return h
}
