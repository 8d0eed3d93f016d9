// Package simhttp holds the HTTP conventions every nomadsim endpoint shares with Nomad's HTTP
// agent: blocking-query parameters, the X-Nomad-* headers, JSON and plain-text error bodies.
package simhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

// Nomad's blocking-query limits (nomad/structs: DefaultBlockingRPCQueryTime and
// MaxBlockingRPCQueryTime), and the jitter fraction it adds to every wait.
const (
	DefaultWait    = 300 * time.Second
	MaxWait        = 600 * time.Second
	JitterFraction = 16
)

// Error is an error with the HTTP status Nomad answers it with. Its text is the body.
type Error struct {
	Code int
	Text string
}

func (e *Error) Error() string { return e.Text }

// Errorf builds an *Error.
func Errorf(code int, text string) *Error { return &Error{Code: code, Text: text} }

// Query holds the query options Nomad's HTTP agent reads from every request.
type Query struct {
	Namespace string
	Region    string
	MinIndex  uint64
	Wait      time.Duration
	Prefix    string
	Filter    string
	PerPage   int32
	NextToken string
	Reverse   bool
}

// ParseQuery reads the common query options. Namespace defaults to "default" as in Nomad.
// A malformed index or wait is a 400 with Nomad's wording.
func ParseQuery(r *http.Request) (Query, error) {
	v := r.URL.Query()
	q := Query{
		Namespace: v.Get("namespace"),
		Region:    v.Get("region"),
		Prefix:    v.Get("prefix"),
		Filter:    v.Get("filter"),
		NextToken: v.Get("next_token"),
	}
	if q.Namespace == "" {
		q.Namespace = "default"
	}
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, Errorf(http.StatusBadRequest, "Invalid index: "+err.Error())
		}
		q.MinIndex = n
	}
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return q, Errorf(http.StatusBadRequest, "Invalid wait time")
		}
		q.Wait = d
	}
	if s := v.Get("per_page"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return q, Errorf(http.StatusBadRequest, "Invalid per_page value")
		}
		q.PerPage = int32(n)
	}
	if s := v.Get("reverse"); s != "" {
		q.Reverse = s == "true"
	}
	return q, nil
}

// Block runs a blocking query the way Nomad's servers do: it calls run until the index it
// reports is greater than q.MinIndex, or until the wait (default 5m, at most 10m, plus up to
// a sixteenth of jitter) ends, and returns the last result. With MinIndex 0 it runs once.
// run reports the index of the data it read; an index of 0 is answered as 1, as Nomad does.
func Block(ctx context.Context, idx *index.Index, q Query, rng func(n int64) int64, run func() (uint64, any, error)) (uint64, any, error) {
	wait := q.Wait
	if wait <= 0 {
		wait = DefaultWait
	}
	if wait > MaxWait {
		wait = MaxWait
	}
	if rng == nil {
		rng = rand.Int64N
	}
	if j := int64(wait) / JitterFraction; j > 0 {
		wait += time.Duration(rng(j))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := idx.Changed()
		got, v, err := run()
		if got == 0 {
			got = 1
		}
		if err != nil || q.MinIndex == 0 || got > q.MinIndex {
			return got, v, err
		}
		select {
		case <-ctx.Done():
			return got, v, ctx.Err()
		case <-timer.C:
			return got, v, nil
		case <-changed:
		}
	}
}

// SetMeta writes the headers Nomad puts on every read: X-Nomad-Index, X-Nomad-KnownLeader
// and X-Nomad-LastContact.
func SetMeta(w http.ResponseWriter, index uint64, knownLeader bool, lastContact time.Duration) {
	if index == 0 {
		index = 1
	}
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	w.Header().Set("X-Nomad-KnownLeader", strconv.FormatBool(knownLeader))
	w.Header().Set("X-Nomad-LastContact", strconv.FormatInt(lastContact.Milliseconds(), 10))
}

// WriteJSON answers 200 with v as JSON, as Nomad's agent encodes it.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers an error with a plain-text body, as Nomad's agent does. An error that
// is not an *Error is a 500 with its text.
func WriteError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	text := err.Error()
	if e, ok := err.(*Error); ok {
		code, text = e.Code, e.Text
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text))
}

// MultiError renders errors as hashicorp/go-multierror's default format does, which Nomad
// uses for its validation errors. A message that is itself such a list nests as Nomad's
// does: its text goes in whole, blank lines and all.
func MultiError(msgs ...string) string {
	if len(msgs) == 1 {
		return fmt.Sprintf("1 error occurred:\n\t* %s\n\n", msgs[0])
	}
	points := make([]string, len(msgs))
	for i, m := range msgs {
		points[i] = "* " + m
	}
	return fmt.Sprintf("%d errors occurred:\n\t%s\n\n", len(msgs), strings.Join(points, "\n\t"))
}
