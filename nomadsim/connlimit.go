package nomadsim

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Nomad's per-client HTTP connection limit (the agent's limits.http_max_conns_per_client,
// default 100, 0 for none), as the agent enforces it: every TCP connection a client address
// holds open counts, from its accept to its close, whether a request is in flight on it, a
// blocking query waits on it or it idles in the client's keep-alive pool. The connection
// that would exceed the limit is refused at accept, before any request is read: the agent
// writes a fixed 429 answer straight onto it and closes it. Those answers are themselves
// rate limited (10 a second, bursts of 100, for all clients together); past that, refused
// connections are closed without a word. A client that wrote its request first may see the
// 429, a reset, or (Go's transport, when the answer came before the request) an "unsolicited
// response" and an error.

// tooManyConnsMsg is the body of Nomad's answer to a connection over the limit.
const tooManyConnsMsg = "Your IP is issuing too many concurrent connections, please rate limit your calls\n"

// tooManyConnsResponse is the whole answer, bytes as Nomad writes them: no Date, no
// X-Nomad-* headers, since no request was read.
var tooManyConnsResponse = fmt.Appendf(nil, "HTTP/1.1 429 Too Many Requests\r\n"+
	"Content-Type: text/plain\r\n"+
	"Content-Length: %d\r\n"+
	"Connection: close\r\n\r\n%s", len(tooManyConnsMsg), tooManyConnsMsg)

// The agent's rate limit on 429 answers, and the deadline of writing one (a client that
// does not read must not hold up the accept loop).
const (
	refusalRate      = 10  // answers per second
	refusalBurst     = 100 // answers at once
	refusalWriteTime = 10 * time.Millisecond
)

// ConnStats is the accounting of the Nomad listener's connections per client address, since
// start or the last ResetConnStats. It is kept whether or not a limit is set, so that tests
// can prove how many connections a client holds.
type ConnStats struct {
	// Refused counts connections refused over Options.MaxConnsPerClient (answered 429, or
	// closed without an answer past the answers' rate limit).
	Refused int64
	// Answered429 counts the refused connections that were sent the 429 answer.
	Answered429 int64
	// PeakPerClient is the most connections one client address held open at once.
	PeakPerClient int
	// Open is the number of connections open now, over all client addresses.
	Open int
	// Active is the number of open connections whose request is being read or served
	// (http.StateActive): a client that goes away after that has its request served.
	Active int
}

// connLimiter tracks the Nomad listener's open connections per client IP and refuses those
// over the limit. It is the listener's http.Server ConnState hook.
type connLimiter struct {
	max int // 0: no limit
	log *slog.Logger

	mu sync.Mutex
	// open holds the accepted connections by client IP. A set and not a count: a refused
	// connection also reaches StateClosed, and must not free a slot it never took.
	open map[string]map[net.Conn]struct{}
	// active holds the connections with a request in flight (StateActive).
	active   map[net.Conn]struct{}
	peak     int
	refused  int64
	answered int64
	bucket   tokenBucket
}

func newConnLimiter(max int, log *slog.Logger) *connLimiter {
	return &connLimiter{
		max:    max,
		log:    log,
		open:   map[string]map[net.Conn]struct{}{},
		active: map[net.Conn]struct{}{},
		bucket: tokenBucket{rate: refusalRate, burst: refusalBurst, tokens: refusalBurst},
	}
}

// connState is the http.Server ConnState hook. The server calls it for StateNew from its
// accept loop, before it reads anything from the connection, so a refusal happens there.
func (l *connLimiter) connState(conn net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		answer, ok := l.accept(conn, time.Now())
		if ok {
			return
		}
		if answer {
			l.log.Warn("Too many concurrent connections", "address", conn.RemoteAddr().String(), "limit", l.max)
			_ = conn.SetDeadline(time.Now().Add(refusalWriteTime))
			_, _ = conn.Write(tooManyConnsResponse)
		}
		_ = conn.Close()
	case http.StateActive, http.StateIdle:
		l.setActive(conn, state == http.StateActive)
	case http.StateHijacked, http.StateClosed:
		// A hijacked connection leaves the server's hands and stops counting, as in Nomad.
		l.release(conn)
	}
}

// accept counts a new connection, or refuses it (ok false) and says whether the refusal
// may be answered with a 429 (the answers' rate limit allows it).
func (l *connLimiter) accept(conn net.Conn, now time.Time) (answer, ok bool) {
	key := clientKey(conn.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.open[key]
	if l.max > 0 && len(set) >= l.max {
		l.refused++
		answer = l.bucket.take(now)
		if answer {
			l.answered++
		}
		return answer, false
	}
	if set == nil {
		set = map[net.Conn]struct{}{}
		l.open[key] = set
	}
	set[conn] = struct{}{}
	l.peak = max(l.peak, len(set))
	return false, true
}

// setActive notes whether conn has a request in flight.
func (l *connLimiter) setActive(conn net.Conn, active bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if active {
		l.active[conn] = struct{}{}
	} else {
		delete(l.active, conn)
	}
}

// release forgets a connection; it does nothing for one that was never counted.
func (l *connLimiter) release(conn net.Conn) {
	key := clientKey(conn.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.active, conn)
	set := l.open[key]
	delete(set, conn)
	if len(set) == 0 {
		delete(l.open, key)
	}
}

func (l *connLimiter) stats() ConnStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := ConnStats{Refused: l.refused, Answered429: l.answered, PeakPerClient: l.peak, Active: len(l.active)}
	for _, set := range l.open {
		s.Open += len(set)
	}
	return s
}

// reset zeroes the counters; the peak restarts from the connections open now.
func (l *connLimiter) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused, l.answered, l.peak = 0, 0, 0
	for _, set := range l.open {
		l.peak = max(l.peak, len(set))
	}
}

// clientKey is the client's IP: Nomad limits addresses, not ports.
func clientKey(addr net.Addr) string {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	default:
		return addr.Network() + "/" + addr.String()
	}
}

// tokenBucket allows rate events a second on average, burst at once, on the real clock:
// the limit protects the agent's resources, not simulated time.
type tokenBucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

// take reports whether an event is allowed at now, spending a token if so.
func (b *tokenBucket) take(now time.Time) bool {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
