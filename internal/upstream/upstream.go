// Package upstream bounds every request to the HTTP APIs the tool depends on (Nomad,
// Consul, Prometheus) and names what went wrong in one line when one of them does not
// answer, or something else answers in its place.
//
// Guard wraps a client's transport. A request gets no answer (its headers) within the
// request timeout (-request-timeout, 10 s by default), or a blocking query within its wait
// plus the jitter the server adds (wait/16) plus that timeout; once the answer began, each
// read of its body must bring something within the timeout, so a large answer that keeps
// coming is never cut, and one that stops is. A long-lived stream (Nomad's event stream)
// has no deadline, but one silent for much longer than its heartbeat is dead. A request
// that outlives its bound fails with *NoAnswerError. An answer that is not the API's (a
// proxy's HTML login page, a plain-text 200, an HTML error page) fails with *NotAPIError,
// as does one that the caller could not decode (Explain), quoting what answered.
package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultTimeout is how long a request waits for an answer, and an answer for its next
// bytes, when -request-timeout does not say: long enough for a loaded server's slowest
// ordinary answer, short enough that three tries (see cluster.RetryPolicy) and their
// backoff stay within a minute.
const DefaultTimeout = 10 * time.Second

// TimeoutFlag is the option that sets the request timeout, for messages.
const TimeoutFlag = "-request-timeout"

// Target is one HTTP API and what its server promises about its answers.
type Target struct {
	// Service names the API in messages: "Nomad", "Consul", "Prometheus".
	Service string
	// Address is the address as configured, for messages.
	Address string
	// Setting says where the address is set, for messages ("-address or NOMAD_ADDR").
	Setting string
	// Timeout bounds the wait for an answer and for each read of it; zero: DefaultTimeout.
	Timeout time.Duration
	// Grace is waited past Timeout for an answer: Prometheus is told to give a query up at
	// Timeout, and the answer that says so takes a moment to come.
	Grace time.Duration

	// DefaultWait and MaxWait are the server's wait for a blocking query (a GET with a
	// non-zero index) that names none, and the most it waits; zero: no blocking queries.
	DefaultWait, MaxWait time.Duration
	// Heartbeat is how often the server writes on a stream (Stream), when nothing else.
	Heartbeat time.Duration
	// Stream reports whether a request opens a long-lived stream; Raw whether its
	// successful answer is not JSON (a file's content, metrics text). Nil: none.
	Stream, Raw func(*http.Request) bool
}

// jitterFraction is the share of a blocking query's wait that Nomad and Consul add at
// random (structs.JitterFraction in both), so that many watchers do not wake together.
const jitterFraction = 16

// Nomad is Nomad's HTTP API at address. Its blocking queries wait 5 minutes unless told
// otherwise, 5 at most (structs.DefaultBlockingRPCQueryTime, MaxBlockingRPCQueryTime); its
// event stream writes a heartbeat "{}" every 30 s (nomad/event_endpoint.go; its HTTP
// side drops a client it cannot write to for 40 s).
func Nomad(address string, timeout time.Duration) Target {
	return Target{Service: "Nomad", Address: address, Setting: "-address or NOMAD_ADDR", Timeout: timeout,
		DefaultWait: 5 * time.Minute, MaxWait: 5 * time.Minute, Heartbeat: 30 * time.Second,
		Stream: func(r *http.Request) bool { return r.URL.Path == "/v1/event/stream" },
		Raw: func(r *http.Request) bool {
			p := r.URL.Path
			for _, prefix := range [...]string{"/v1/client/fs/cat/", "/v1/client/fs/readat/", "/v1/client/fs/stream/",
				"/v1/client/fs/logs/", "/v1/agent/pprof/", "/v1/metrics"} {
				if strings.HasPrefix(p, prefix) {
					return true
				}
			}
			return false
		}}
}

// Consul is Consul's HTTP API at address (its blocking queries: 5 minutes by default, 10
// at most, and the same jitter as Nomad's).
func Consul(address string, timeout time.Duration) Target {
	return Target{Service: "Consul", Address: address, Setting: "-consul-address or CONSUL_HTTP_ADDR", Timeout: timeout,
		DefaultWait: 5 * time.Minute, MaxWait: 10 * time.Minute,
		Raw: func(r *http.Request) bool {
			p := r.URL.Path
			return (strings.HasPrefix(p, "/v1/kv/") && r.URL.Query().Has("raw")) ||
				strings.HasPrefix(p, "/v1/snapshot") || strings.HasSuffix(p, "/metrics")
		}}
}

// Prometheus is Prometheus's HTTP API at address; a query is given a second past timeout
// for Prometheus's own "query timed out" answer.
func Prometheus(address string, timeout time.Duration) Target {
	return Target{Service: "Prometheus", Address: address, Setting: "-prometheus-address", Timeout: timeout, Grace: time.Second}
}

func (t Target) timeout() time.Duration {
	if t.Timeout > 0 {
		return t.Timeout
	}
	return DefaultTimeout
}

// Guard bounds every request of next to t's deadlines, and refuses answers that are not
// t's API. Wrap it around the transport the api client's TLS is configured on.
func Guard(next http.RoundTripper, t Target) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &guard{next: next, t: t}
}

type guard struct {
	next http.RoundTripper
	t    Target
}

// bounds are one request's: how long its answer may take to begin (0: only its context
// bounds it), and each read of it to bring something; said is the first as a message says
// it (the timeout the user set, without the grace).
type bounds struct {
	answer, read, said time.Duration
}

func (g *guard) bounds(req *http.Request) bounds {
	t := g.t.timeout()
	switch {
	case unbounded(req.Context()):
		return bounds{read: t}
	case g.t.Stream != nil && g.t.Stream(req):
		// The heartbeat and then some: a stream whose heartbeats stopped is dead.
		return bounds{answer: t, read: g.t.Heartbeat + 2*t, said: t}
	}
	if wait, ok := g.blockingWait(req); ok {
		d := wait + wait/jitterFraction + t
		return bounds{answer: d, read: t, said: d}
	}
	return bounds{answer: t + g.t.Grace, read: t, said: t}
}

// blockingWait is how long the server may hold req as a blocking query, if it is one.
func (g *guard) blockingWait(req *http.Request) (time.Duration, bool) {
	if g.t.DefaultWait <= 0 || req.Method != http.MethodGet {
		return 0, false
	}
	q := req.URL.Query()
	if idx := q.Get("index"); idx == "" || idx == "0" {
		return 0, false // Nomad and Consul answer at once without an index
	}
	wait := g.t.DefaultWait
	if w, err := time.ParseDuration(q.Get("wait")); err == nil && w > 0 {
		wait = w
	}
	if g.t.MaxWait > 0 {
		wait = min(wait, g.t.MaxWait)
	}
	return wait, true
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	b := g.bounds(req)
	ctx, cancel := context.WithCancelCause(req.Context())
	silent := g.noAnswer(b.said, false)
	var timer *time.Timer
	if b.answer > 0 {
		timer = time.AfterFunc(b.answer, func() { cancel(silent) })
	}
	resp, err := g.next.RoundTrip(req.WithContext(ctx))
	fired := timer != nil && !timer.Stop()
	if err != nil || fired {
		if resp != nil {
			_ = resp.Body.Close()
		}
		cancel(nil)
		if fired && req.Context().Err() == nil {
			return nil, silent
		}
		return nil, err
	}
	body := &body{rc: resp.Body, ctx: ctx, cancel: cancel, idle: b.read, stalled: g.noAnswer(b.read, true)}
	if rec := recorderOf(req.Context()); rec != nil {
		body.tee = rec.answered(g.t, resp)
	}
	resp.Body = body
	if err := g.checkAnswer(req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func (g *guard) noAnswer(after time.Duration, stalled bool) *NoAnswerError {
	return &NoAnswerError{Service: g.t.Service, Address: g.t.Address, Setting: g.t.Setting, After: after, Stalled: stalled}
}

// checkAnswer refuses an answer that is not the API's: HTML (none of the APIs ever
// answers with it; a proxy's or another server's page does), or a successful answer that
// is not JSON ("OK"). It reads the first bytes of an answer not labelled JSON to tell; one
// labelled JSON is left unread.
func (g *guard) checkAnswer(req *http.Request, resp *http.Response) error {
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	html := mt == "text/html" || mt == "application/xhtml+xml"
	ok := resp.StatusCode/100 == 2
	switch {
	case html:
	case !ok || isJSON(mt) || resp.StatusCode == http.StatusNoContent || req.Method == http.MethodHead ||
		resp.ContentLength == 0 || (g.t.Raw != nil && g.t.Raw(req)):
		return nil
	}
	head, err := peek(resp)
	if !html && (err != nil || len(bytes.TrimSpace(head)) == 0 || looksJSON(head)) {
		// Nothing, or JSON under another content type (a server that let Go sniff it:
		// text/plain): the caller's decoding judges it (Explain), or meets the same
		// failure to read.
		resp.Body = &prefixed{Reader: io.MultiReader(bytes.NewReader(head), resp.Body), Closer: resp.Body}
		return nil
	}
	_ = resp.Body.Close()
	return &NotAPIError{Service: g.t.Service, Address: g.t.Address, Setting: g.t.Setting,
		Status: resp.StatusCode, ContentType: ct, Snippet: quote(head, resp.Header.Get("Content-Encoding"))}
}

// peekSize is how much of an answer is read to quote it.
const peekSize = 256

func peek(resp *http.Response) ([]byte, error) {
	buf := make([]byte, peekSize)
	n, err := io.ReadFull(resp.Body, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return buf[:n], err
}

type prefixed struct {
	io.Reader
	io.Closer
}

func isJSON(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

// looksJSON reports whether b begins as a JSON value does.
func looksJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return false
	}
	switch c := b[0]; {
	case c == '{', c == '[', c == '"', c == '-', c >= '0' && c <= '9':
		return true
	}
	return bytes.HasPrefix(b, []byte("true")) || bytes.HasPrefix(b, []byte("false")) || bytes.HasPrefix(b, []byte("null"))
}

// quoteRunes is how much of an answer a message quotes.
const quoteRunes = 40

// quote is the start of an answer as a message quotes it: one line, at most quoteRunes,
// quoted, with "..." when cut; "" for an empty answer.
func quote(b []byte, encoding string) string {
	if strings.EqualFold(encoding, "gzip") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return ""
		}
		b, _ = io.ReadAll(io.LimitReader(zr, peekSize)) // a partial stream decodes as far as it goes
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if s == "" {
		return ""
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	cut := false
	if r := []rune(s); len(r) > quoteRunes {
		s, cut = string(r[:quoteRunes]), true
	}
	q := strconv.Quote(s)
	if cut {
		q += "..."
	}
	return q
}

// body bounds each read of an answer: a read that brings nothing within idle ends the
// request with the stalled error. The time between reads is the caller's, not counted.
type body struct {
	rc      io.ReadCloser
	ctx     context.Context
	cancel  context.CancelCauseFunc
	idle    time.Duration
	stalled *NoAnswerError
	tee     *answer

	mu    sync.Mutex
	timer *time.Timer
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.timer == nil {
		b.timer = time.AfterFunc(b.idle, func() { b.cancel(b.stalled) })
	} else {
		b.timer.Reset(b.idle)
	}
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.timer.Stop()
	b.mu.Unlock()
	if n > 0 && b.tee != nil {
		b.tee.add(p[:n])
	}
	if err != nil && err != io.EOF && context.Cause(b.ctx) == b.stalled {
		return n, b.stalled
	}
	return n, err
}

func (b *body) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	b.cancel(nil)
	return err
}

// unboundedKey marks a context whose requests wait for their answer as long as it lasts.
type unboundedKey struct{}

// Unbounded returns ctx for a request whose answer comes only once what it asked for is
// done (Nomad answers an allocation's restart once its tasks stopped, after their
// shutdown_delay and kill_timeout): no request timeout applies until the answer begins,
// only ctx's deadline. Its answer's reads are still bounded.
func Unbounded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unboundedKey{}, true)
}

func unbounded(ctx context.Context) bool {
	v, _ := ctx.Value(unboundedKey{}).(bool)
	return v
}

// NoAnswerError is a request that got no answer within its bound, or whose answer stopped
// coming (Stalled). It is a timeout (net.Error), worth one more try.
type NoAnswerError struct {
	Service, Address, Setting string
	// After is the bound that passed.
	After   time.Duration
	Stalled bool
	// Tries, when above 1, is how many requests a retry loop sent before giving up.
	Tries int
}

func (e *NoAnswerError) Error() string {
	what := "did not answer within " + seconds(e.After)
	if e.Stalled {
		what = "stopped answering for " + seconds(e.After)
	}
	if e.Tries > 1 {
		what += fmt.Sprintf(" (%d tries)", e.Tries)
	}
	return fmt.Sprintf("%s at %s %s; check %s, or raise %s", e.Service, e.Address, what, e.Setting, TimeoutFlag)
}

// Timeout and Temporary make it a net.Error that timed out.
func (e *NoAnswerError) Timeout() bool   { return true }
func (e *NoAnswerError) Temporary() bool { return true }

// seconds is d as the messages say it: whole seconds when it is that long.
func seconds(d time.Duration) string {
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	return d.String()
}

// NotAPIError is an answer that is not the API's: something else listens at the address
// (another service, a proxy's login page), or the API sits behind another path.
type NotAPIError struct {
	Service, Address, Setting string
	// Status and ContentType are the answer's; Snippet its first bytes, quoted ("" when
	// empty).
	Status      int
	ContentType string
	Snippet     string
	// Cause is why the caller could not read it (a decoding error), when it was not
	// refused for its content type.
	Cause error
}

func (e *NotAPIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Address + " answered")
	if e.Status != http.StatusOK && e.Status != 0 {
		fmt.Fprintf(&b, " %d", e.Status)
	}
	ct := e.ContentType
	if ct == "" {
		ct = "no content type"
	} else if mt, _, err := mime.ParseMediaType(ct); err == nil {
		ct = mt
	}
	b.WriteString(" with " + ct)
	if e.Snippet != "" {
		b.WriteString(" (" + e.Snippet + ")")
	} else {
		b.WriteString(" (empty)")
	}
	fmt.Fprintf(&b, ", not %s's API", e.Service)
	if e.Cause != nil {
		b.WriteString(" (" + firstLine(e.Cause.Error()) + ")")
	}
	b.WriteString("; check " + e.Setting)
	return b.String()
}

func (e *NotAPIError) Unwrap() error { return e.Cause }

// Temporary reports whether the same request may get the API's answer: a proxy's page for
// a 502 or 503 says the server behind it is away for now.
func (e *NotAPIError) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// Find returns the first *NoAnswerError or *NotAPIError in err's chain: a line that says
// on its own what is wrong and what to do.
func Find(err error) (error, bool) {
	if na, ok := errors.AsType[*NoAnswerError](err); ok {
		return na, true
	}
	if ne, ok := errors.AsType[*NotAPIError](err); ok {
		return ne, true
	}
	return nil, false
}
