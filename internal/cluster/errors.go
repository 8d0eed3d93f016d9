package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// statusCode returns the HTTP status Nomad answered with, or 0 when err carries none
// (a transport error, a decoding error, a canceled context).
func statusCode(err error) int {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) {
		return ure.StatusCode()
	}
	var pure *api.UnexpectedResponseError
	if errors.As(err, &pure) && pure != nil {
		return pure.StatusCode()
	}
	return 0
}

// responseBody returns the body of Nomad's error answer (plain text such as
// "job not found"), or "" when err carries none.
func responseBody(err error) string {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) {
		return ure.Body()
	}
	var pure *api.UnexpectedResponseError
	if errors.As(err, &pure) && pure != nil {
		return pure.Body()
	}
	return ""
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

// permanentServerError reports whether a 500 body is an answer that will not change on a
// retry: it comes from the client node refusing the request, not from a struggling server.
func permanentServerError(body string) bool {
	for _, t := range [...]string{
		"Task not running",
		"Could not find task runner",
		"should not run",
		"Unknown allocation",
		"unknown allocation",
		"not found",
	} {
		if strings.Contains(body, t) {
			return true
		}
	}
	return false
}

// IsTransient reports whether err is likely to go away when the same request is sent
// again: a transport failure (connection refused or reset, a timeout, a cut answer), a
// 429, or a 5xx such as "No cluster leader". Answers that will not change (4xx, and the
// 500s a client node gives for a task that is not running or unknown) are not transient,
// nor is a canceled or expired context.
//
// Reads are retried here on transient errors. Writes (restart, stop, evaluate) are not:
// the engine decides from Nomad's facts whether the write took effect before repeating it.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if code := statusCode(err); code != 0 {
		if code == http.StatusTooManyRequests {
			return true
		}
		if code < 500 {
			return false
		}
		return !permanentServerError(responseBody(err))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var urlErr *url.Error
	return errors.As(err, &urlErr)
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
