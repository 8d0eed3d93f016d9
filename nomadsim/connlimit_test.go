package nomadsim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeConn is a connection from a given client address; only RemoteAddr is used.
type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }

func connFrom(ip string, port int) *fakeConn {
	return &fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestConnLimiterCountsPerClientIP(t *testing.T) {
	now := time.Unix(1000, 0)
	type step struct {
		op     string // "new", "close", "hijack"
		conn   int    // index into conns
		wantOK bool   // for "new": accepted
	}
	conns := []*fakeConn{
		connFrom("10.0.0.1", 1001), // 0
		connFrom("10.0.0.1", 1002), // 1
		connFrom("10.0.0.1", 1003), // 2
		connFrom("10.0.0.2", 1001), // 3: another client, same port as 0
		connFrom("10.0.0.1", 1004), // 4
	}
	cases := []struct {
		name        string
		max         int
		steps       []step
		wantRefused int64
		wantOpen    int
		wantPeak    int
	}{
		{
			name: "the connection over the limit is refused, another address is not",
			max:  2,
			steps: []step{
				{"new", 0, true}, {"new", 1, true}, {"new", 2, false}, {"new", 3, true},
			},
			wantRefused: 1, wantOpen: 3, wantPeak: 2,
		},
		{
			name: "a closed connection frees its slot",
			max:  2,
			steps: []step{
				{"new", 0, true}, {"new", 1, true}, {"close", 0, false}, {"new", 2, true}, {"new", 4, false},
			},
			wantRefused: 1, wantOpen: 2, wantPeak: 2,
		},
		{
			name: "a hijacked connection stops counting",
			max:  1,
			steps: []step{
				{"new", 0, true}, {"hijack", 0, false}, {"new", 1, true},
			},
			wantOpen: 1, wantPeak: 1,
		},
		{
			// The server reports StateClosed for the refused connection too: it must not
			// free a slot held by an accepted one.
			name: "closing a refused connection frees nothing",
			max:  1,
			steps: []step{
				{"new", 0, true}, {"new", 1, false}, {"close", 1, false}, {"new", 2, false},
			},
			wantRefused: 2, wantOpen: 1, wantPeak: 1,
		},
		{
			name: "0 is no limit",
			max:  0,
			steps: []step{
				{"new", 0, true}, {"new", 1, true}, {"new", 2, true}, {"new", 4, true}, {"close", 2, false},
			},
			wantOpen: 3, wantPeak: 4,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newConnLimiter(tc.max, discardLogger())
			for i, s := range tc.steps {
				c := conns[s.conn]
				switch s.op {
				case "new":
					if _, ok := l.accept(c, now); ok != s.wantOK {
						t.Fatalf("step %d: accept conn %d = %v, want %v", i, s.conn, ok, s.wantOK)
					}
				case "close":
					l.connState(c, http.StateClosed)
				case "hijack":
					l.connState(c, http.StateHijacked)
				}
			}
			got := l.stats()
			if got.Refused != tc.wantRefused || got.Open != tc.wantOpen || got.PeakPerClient != tc.wantPeak {
				t.Errorf("stats %+v, want Refused %d, Open %d, PeakPerClient %d", got, tc.wantRefused, tc.wantOpen, tc.wantPeak)
			}
		})
	}
}

// The 429 answers are rate limited like Nomad's: a burst of 100, then 10 a second.
func TestConnLimiterAnswerRate(t *testing.T) {
	l := newConnLimiter(1, discardLogger())
	now := time.Unix(1000, 0)
	if _, ok := l.accept(connFrom("10.0.0.1", 1), now); !ok {
		t.Fatal("first connection refused")
	}
	answered := 0
	for i := range 150 {
		answer, ok := l.accept(connFrom("10.0.0.1", 2+i), now)
		if ok {
			t.Fatalf("connection %d over the limit accepted", i)
		}
		if answer {
			answered++
		}
	}
	if answered != refusalBurst {
		t.Errorf("%d refusals answered at once, want the burst of %d", answered, refusalBurst)
	}
	// Half a second later, 5 answers have been earned back.
	later := now.Add(500 * time.Millisecond)
	answered = 0
	for i := range 20 {
		if answer, _ := l.accept(connFrom("10.0.0.1", 500+i), later); answer {
			answered++
		}
	}
	if answered != 5 {
		t.Errorf("%d refusals answered after 500ms, want 5", answered)
	}
	s := l.stats()
	if s.Refused != 170 || s.Answered429 != refusalBurst+5 {
		t.Errorf("stats %+v, want 170 refused, %d answered", s, refusalBurst+5)
	}
	l.reset()
	if s := l.stats(); s.Refused != 0 || s.Answered429 != 0 || s.PeakPerClient != 1 || s.Open != 1 {
		t.Errorf("after reset %+v, want zero counters and the peak of the one open connection", s)
	}
}

func TestStartRejectsNegativeConnLimit(t *testing.T) {
	c, err := Start(context.Background(), Options{MaxConnsPerClient: -1})
	if err == nil {
		_ = c.Close()
		t.Fatal("Start accepted MaxConnsPerClient -1")
	}
	if !strings.Contains(err.Error(), "MaxConnsPerClient") {
		t.Errorf("error %q does not name the option", err)
	}
}

// dialN opens n raw connections to the cluster's Nomad listener, closed with the test.
func dialN(t *testing.T, c *Cluster, n int) []net.Conn {
	t.Helper()
	host := strings.TrimPrefix(c.Addr(), "http://")
	out := make([]net.Conn, 0, n)
	for range n {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		out = append(out, conn)
	}
	return out
}

// waitOpen waits until the cluster counts want open connections: the server sees accepts
// and closes a moment after the client.
func waitOpen(t *testing.T, c *Cluster, want int) {
	t.Helper()
	ctx := ctxT(t)
	for c.ConnStats().Open != want {
		select {
		case <-ctx.Done():
			t.Fatalf("open connections %d, want %d", c.ConnStats().Open, want)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// readRefusal reads what the server sends on a connection it refused, up to its close.
func readRefusal(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the refused connection: %v (got %q)", err, b)
	}
	return b
}

func TestConnLimitRefusesWith429AndReleases(t *testing.T) {
	c, _ := startCluster(t, Options{MaxConnsPerClient: 3, Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
	held := dialN(t, c, 3)
	waitOpen(t, c, 3)

	// The fourth is answered before it sends anything, with Nomad's bytes, then closed.
	over := dialN(t, c, 1)[0]
	if got := readRefusal(t, over); !bytes.Equal(got, tooManyConnsResponse) {
		t.Errorf("over the limit got\n%q\nwant\n%q", got, tooManyConnsResponse)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(tooManyConnsResponse)), nil)
	if err != nil {
		t.Fatalf("the 429 answer does not parse as HTTP: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || string(body) != tooManyConnsMsg || !resp.Close {
		t.Errorf("parsed answer: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if s := c.ConnStats(); s.Refused != 1 || s.Answered429 != 1 || s.Open != 3 || s.PeakPerClient != 3 {
		t.Errorf("stats %+v, want 1 refused and answered, 3 open, peak 3", s)
	}

	// A held connection serves requests as usual.
	if _, err := fmt.Fprintf(held[0], "GET /v1/status/leader HTTP/1.1\r\nHost: sim\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r, err := http.ReadResponse(bufio.NewReader(held[0]), nil)
	if err != nil {
		t.Fatalf("request on a held connection: %v", err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Errorf("request on a held connection: %d", r.StatusCode)
	}

	// Closing one frees its slot.
	_ = held[1].Close()
	waitOpen(t, c, 2)
	next := dialN(t, c, 1)[0]
	if _, err := fmt.Fprintf(next, "GET /v1/status/leader HTTP/1.1\r\nHost: sim\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r, err = http.ReadResponse(bufio.NewReader(next), nil)
	if err != nil {
		t.Fatalf("request after a slot was freed: %v", err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Errorf("request after a slot was freed: %d", r.StatusCode)
	}
}

// Blocking queries hold their connections, and idle keep-alive connections count too: a
// client's pool is what the limit sees.
func TestConnLimitCountsBlockingQueriesAndIdleConns(t *testing.T) {
	const limit = 10
	c, _ := startCluster(t, Options{MaxConnsPerClient: limit, Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
	// The pool keeps every connection once its query ends.
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * limit}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ctx := ctxT(t)

	// limit blocking queries that nothing wakes, each on its own connection; they end with
	// their (real-time) wait.
	idx := c.sim.Index.Current()
	var wg sync.WaitGroup
	for range limit {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=1s", c.Addr(), idx+1000), nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Errorf("blocking query: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("blocking query: %d", resp.StatusCode)
			}
		})
	}
	waitOpen(t, c, limit)

	// Another client on the same address is refused, through the official api client.
	other, err := c.APIClient("")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Jobs().List(nil); err == nil {
		t.Fatal("a request over the limit succeeded")
	} else {
		t.Logf("over the limit: %v", err)
	}

	// The queries end: their connections idle in the pool, and still count.
	wg.Wait()
	if s := c.ConnStats(); s.Open != limit || s.PeakPerClient != limit {
		t.Errorf("stats %+v after the queries ended, want %d open (idle in the pool), peak %d", s, limit, limit)
	}
	before := c.ConnStats().Refused
	if got := readRefusal(t, dialN(t, c, 1)[0]); !bytes.Equal(got, tooManyConnsResponse) {
		t.Errorf("with %d idle pooled connections, over the limit got %q", limit, got)
	}
	if s := c.ConnStats(); s.Refused != before+1 {
		t.Errorf("refusals %d, want %d", s.Refused, before+1)
	}

	// Closing the pool frees every slot, and the other client is served.
	tr.CloseIdleConnections()
	waitOpen(t, c, 0)
	if _, _, err := other.Jobs().List(nil); err != nil {
		t.Errorf("after the pool closed: %v", err)
	}
}

func TestConnLimitZeroIsUnlimited(t *testing.T) {
	const n = 150 // more than Nomad's default limit
	c, _ := startCluster(t, Options{Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
	conns := dialN(t, c, n)
	waitOpen(t, c, n)
	for i, conn := range conns {
		if _, err := fmt.Fprintf(conn, "GET /v1/status/leader HTTP/1.1\r\nHost: sim\r\n\r\n"); err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
	}
	for i, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
		_ = r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Errorf("conn %d: %d", i, r.StatusCode)
		}
	}
	if s := c.ConnStats(); s.Refused != 0 || s.PeakPerClient != n {
		t.Errorf("stats %+v, want no refusal and a peak of %d", s, n)
	}
}

// A blocking query the client gives up on keeps its connection on the agent until its wait
// ends, as Nomad's handlers run their RPC without the request's context: the slot is not
// free when the client's side is closed.
func TestConnLimitCanceledBlockingQueryHoldsItsSlot(t *testing.T) {
	const limit = 2
	c, _ := startCluster(t, Options{MaxConnsPerClient: limit, Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	for range limit {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/jobs?index=%d&wait=60s", c.Addr(), c.sim.Index.Current()+1000), nil)
			if resp, err := hc.Do(req); err == nil {
				_ = resp.Body.Close()
				t.Errorf("blocking query answered %d before it was canceled", resp.StatusCode)
			}
		})
	}
	waitOpen(t, c, limit)
	// Both requests reached the server (a connection canceled before its request was read
	// would carry no request to account).
	waitFor(t, "both blocking queries read", func() bool { return c.ConnStats().Active == limit })
	c.ResetStats()
	cancel()
	wg.Wait() // the client has closed both connections
	// Give the server ample time to notice the closes, were it to end the handlers on them.
	time.Sleep(100 * time.Millisecond)
	if got := readRefusal(t, dialN(t, c, 1)[0]); !bytes.Equal(got, tooManyConnsResponse) {
		t.Errorf("after the client canceled its blocking queries, a new connection got %q, want the 429", got)
	}
	if s := c.ConnStats(); s.Open != limit {
		t.Errorf("open connections %d after the cancel, want %d until the queries' wait ends", s.Open, limit)
	}
	// The requests are accounted when their client went away, not when their wait ends.
	waitFor(t, "the canceled queries accounted", func() bool {
		return c.Stats().Get("GET", "/v1/jobs").Requests == limit
	})
}
