package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// Errors the cluster reports, to be matched with errors.Is / errors.As.
var (
	ErrJobNotFound   = errors.New("job not found")
	ErrAllocNotFound = errors.New("alloc not found")
	//lint:ignore ST1005 Nomad's own text, which users search for
	ErrPermissionDenied = errors.New("Permission denied")
	// ErrNotSupported is the answer of a Cluster that lacks an optional feature (a job's
	// summary, an event stream, filters): callers with a fallback take it, others report
	// that the feature is missing.
	ErrNotSupported = errors.New("not supported by this cluster client")
)

// statusCode returns the HTTP status Nomad answered with, or 0 when err carries none
// (a transport error, a decoding error, a canceled context).
func statusCode(err error) int {
	if a, ok := answerAs[interface{ StatusCode() int }](err); ok {
		return a.StatusCode()
	}
	return 0
}

// responseBody returns the body of Nomad's error answer (plain text such as
// "job not found"), or "" when err carries none.
func responseBody(err error) string {
	if a, ok := answerAs[interface{ Body() string }](err); ok {
		return a.Body()
	}
	return ""
}

// answerAs finds Nomad's answer in err as an A (an interface of the answer's methods):
// the api module's UnexpectedResponseError, by value or pointer (a nil pointer carries
// none), or any error with A's methods (an in-memory cluster's answers say their code and
// body that way).
func answerAs[A any](err error) (A, bool) {
	var none A
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) {
		a, ok := any(ure).(A)
		return a, ok
	}
	var pure *api.UnexpectedResponseError
	if errors.As(err, &pure) {
		if pure == nil {
			return none, false
		}
		a, ok := any(pure).(A)
		return a, ok
	}
	var a A
	if errors.As(err, &a) {
		return a, true
	}
	return none, false
}

// kindError attaches one of the package's sentinel errors to Nomad's own error, so that
// callers can match with errors.Is while the message keeps Nomad's words.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// classify maps Nomad's answers onto the package's sentinels: 403 is ErrPermissionDenied,
// and a 404 is notFound (ErrJobNotFound or ErrAllocNotFound, depending on what was read;
// nil leaves 404 alone).
func classify(err error, notFound error) error {
	if err == nil {
		return nil
	}
	switch code := statusCode(err); {
	case code == http.StatusForbidden:
		return &kindError{kind: ErrPermissionDenied, err: err}
	case code == http.StatusNotFound && notFound != nil:
		return &kindError{kind: notFound, err: err}
	case code == 0 && strings.Contains(err.Error(), api.PermissionDeniedErrorContent):
		// Some paths (websockets, older agents) report a denial without a status.
		return &kindError{kind: ErrPermissionDenied, err: err}
	}
	return err
}

// serverErrorTransient reports whether Nomad's 5xx answer may pass when the request is sent
// again, from its status and its text. Nomad's HTTP agent answers every RPC error that
// carries no code of its own with a 500 and the error's text (command/agent/http.go), so a
// 500 is as often a refusal that will not change (a limit, a validation error, a
// check-and-set, a client node's answer) as a struggling cluster: the text tells them
// apart. Texts of neither kind count as passing: the retry's budget bounds what that costs.
func serverErrorTransient(code int, body string) bool {
	switch code {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true // a proxy, or Nomad itself, says the cluster cannot answer now
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return false
	}
	switch {
	case containsAny(body, transientTexts):
		return true
	case containsAny(body, permanentTexts):
		return false
	}
	return true
}

// transientTexts are Nomad's words for failures that pass: a lost or changing leader, a
// server shutting down, a connection between agents lost or timed out. A request through a
// client agent, or a server that forwards it to the leader, carries them after "rpc error: ".
var transientTexts = []string{
	"No cluster leader",                    // structs.ErrNoLeader: no leader within rpc_hold_timeout
	"Not ready to serve consistent reads",  // structs.ErrNotReadyForConsistentReads: a new leader
	"leadership lost while committing log", // raft.ErrLeadershipLost
	"node is not the leader",               // raft.ErrNotLeader
	"leadership transfer in progress",      // raft.ErrLeadershipTransferInProgress
	"timed out enqueuing operation",        // raft.ErrEnqueueTimeout
	"raft is already shutdown",             // raft.ErrRaftShutdown
	"rpc error: EOF",                       // helper/pool: the server closed the session
	"unexpected EOF",
	"i/o timeout",                       // an RPC connection's deadline
	"i/o deadline reached",              // yamux.ErrTimeout
	"keepalive timeout",                 // yamux.ErrKeepAliveTimeout
	"connection write timeout",          // yamux.ErrConnectionWriteTimeout
	"session shutdown",                  // yamux.ErrSessionShutdown
	"connection refused",                // a server down
	"connection reset",                  // yamux.ErrConnectionReset, or TCP's
	"broken pipe",                       //
	"failed to get conn",                // helper/pool: no connection to the server
	"lead thread didn't get connection", // helper/pool
}

// permanentTexts are Nomad's words for answers that do not change when the request is sent
// again.
var permanentTexts = []string{
	// Limits and validation: Job.Scale and the job validators (go-multierror's list).
	"job_max_count",
	" error occurred:",
	" errors occurred:",
	// A check-and-set that failed: the same request fails again.
	"conflicting job modify index",
	"Enforcing job modify index",
	// ACLs and the scheduler configuration (a 403 from the agent itself; the texts, when an
	// error is relayed).
	"Permission denied",
	"ACL token not found",
	"ACL token expired",
	"ACL token is invalid",
	"disabled by the scheduler configuration",
	// Unknown objects (structs' ErrUnknown*Prefix) and the client node's refusals.
	"Unknown allocation",
	"unknown allocation",
	"Unknown job",
	"Unknown node",
	"Unknown evaluation",
	"Unknown deployment",
	"not found",
	"nonexistent namespace",
	"terminal deployment",
	"Task not running",
	"Could not find task runner",
	"should not run",
}

// containsAny reports whether s contains one of texts.
func containsAny(s string, texts []string) bool {
	for _, t := range texts {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

// IsTransient reports whether err is likely to go away when the same request is sent
// again: a transport failure (connection refused or reset, a timeout, a cut answer), a
// 429, a 502, 503 or 504, or a 500 whose text says the cluster struggles ("No cluster
// leader", a Raft or RPC timeout; see transientTexts). Answers that will not change are
// not: a 4xx, a 501, and a 500 whose text is a refusal (a limit such as job_max_count, a
// validation error, a failed check-and-set, a denial, an unknown object, a client node's
// "Task not running"; see permanentTexts). Neither is a canceled or expired context, nor
// an error that says a job or allocation is unknown, a permission is missing, an
// allocation cannot be placed or a job would pass job_max_count, whatever wraps it. A 500
// whose text is of neither kind counts as passing: the retry's budget bounds it.
// It is the project's one rule: the stores, the engine and the health sources use it.
//
// Reads are retried here on transient errors. Writes (restart, stop, evaluate) are not:
// the engine decides from Nomad's facts whether the write took effect before repeating it.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// No answer in time may come next time (a server busy electing a leader); another
	// server's answer will not, unless a proxy said the one behind it is away (a 502).
	if _, ok := errors.AsType[*upstream.NoAnswerError](err); ok {
		return true
	}
	if na, ok := errors.AsType[*upstream.NotAPIError](err); ok {
		return na.Temporary()
	}
	var tooMany *JobMaxCountError
	if errors.Is(err, ErrJobNotFound) || errors.Is(err, ErrAllocNotFound) || errors.Is(err, ErrPermissionDenied) ||
		errors.Is(err, restart.ErrPlacementFailure) || errors.As(err, &tooMany) {
		return false
	}
	code, body := statusCode(err), ""
	if code != 0 {
		body = responseBody(err)
	} else {
		code, body = statusFromText(err.Error())
	}
	if code != 0 {
		if code == http.StatusTooManyRequests {
			return true
		}
		if code < 500 {
			return false
		}
		return serverErrorTransient(code, body)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return true
	}
	// A lost leader reported without a status (an RPC error relayed as text).
	return strings.Contains(err.Error(), "No cluster leader")
}

// notSent reports whether err proves that the request never reached Nomad (the
// connection could not be opened), so that even a write may be sent again safely.
func notSent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// answerText is how the api module words an answer it did not expect.
const answerText = "Unexpected response code: "

// statusFromText reads the status and body out of an answer's error that lost its type on
// the way (flattened into another error's text): "Unexpected response code: 503 (body)".
// It returns 0 when msg holds no such answer.
func statusFromText(msg string) (int, string) {
	i := strings.Index(msg, answerText)
	if i < 0 {
		return 0, ""
	}
	rest := msg[i+len(answerText):]
	code := 0
	n := 0
	for n < len(rest) && n < 3 && rest[n] >= '0' && rest[n] <= '9' {
		code = code*10 + int(rest[n]-'0')
		n++
	}
	if n != 3 {
		return 0, ""
	}
	return code, strings.TrimSpace(rest[n:])
}

// AmbiguousJobError is returned when a prefix matches several jobs.
type AmbiguousJobError struct {
	Prefix string
	// Matches are "namespace/id" of the jobs the prefix matched.
	Matches []string
}

func (e *AmbiguousJobError) Error() string {
	return "prefix \"" + e.Prefix + "\" matched multiple jobs"
}
