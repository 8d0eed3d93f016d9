package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
)

// An answer that is JSON but not the API's (another service's JSON, an object where the
// API answers a string) passes Guard: only the caller's decoding finds it out, after Guard
// let it go. Record and Explain tie the two together: the caller's context carries a
// recorder, Guard notes in it the last answer the context's requests got (its start as it
// was read), and Explain turns the caller's decoding error into a *NotAPIError quoting it.

type recorderKey struct{}

type recorder struct {
	mu   sync.Mutex
	last *answer
}

// answer is one successful answer as far as a message needs it.
type answer struct {
	t           Target
	status      int
	contentType string
	encoding    string

	mu   sync.Mutex
	head []byte
}

func (a *answer) add(p []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if room := peekSize - len(a.head); room > 0 {
		a.head = append(a.head, p[:min(room, len(p))]...)
	}
}

// Record returns ctx carrying a recorder of the answers its requests get, for Explain.
func Record(ctx context.Context) context.Context {
	return context.WithValue(ctx, recorderKey{}, &recorder{})
}

func recorderOf(ctx context.Context) *recorder {
	r, _ := ctx.Value(recorderKey{}).(*recorder)
	return r
}

// answered notes a successful answer to one of the recorder's requests and returns where
// its body's first bytes go as they are read. Answers with an error status are the
// caller's to explain (they carry their body), and are not noted.
func (r *recorder) answered(t Target, resp *http.Response) *answer {
	if resp.StatusCode/100 != 2 {
		return nil
	}
	a := &answer{t: t, status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"),
		encoding: resp.Header.Get("Content-Encoding")}
	r.mu.Lock()
	r.last = a
	r.mu.Unlock()
	return a
}

func (r *recorder) latest() *answer {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Explain returns err, or, when err is a failure to decode an answer that a request of ctx
// (a context from Record) got, a *NotAPIError naming the address and quoting the answer.
func Explain(ctx context.Context, err error) error {
	if err == nil || !decodeError(err) {
		return err
	}
	return NotTheAPI(ctx, err)
}

// NotTheAPI is Explain for a caller that knows err means the answer was not the API's (a
// client library that words its decoding errors its own way); err when ctx recorded no
// answer.
func NotTheAPI(ctx context.Context, err error) error {
	if _, ok := Find(err); ok {
		return err
	}
	a := recorderOf(ctx).latest()
	if a == nil {
		return err
	}
	a.mu.Lock()
	head := append([]byte(nil), a.head...)
	a.mu.Unlock()
	return &NotAPIError{Service: a.t.Service, Address: a.t.Address, Setting: a.t.Setting, Status: a.status,
		ContentType: a.contentType, Snippet: quote(head, a.encoding), Cause: err}
}

// decodeError reports whether err says an answer could not be decoded as JSON of the
// expected shape: encoding/json's errors, and the api modules' word for an empty answer.
func decodeError(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.As(err, &syntax) || errors.As(err, &typ) ||
		strings.Contains(err.Error(), "Got 0 byte response")
}
