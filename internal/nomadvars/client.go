// Package nomadvars is the project's one way to keep state in Nomad Variables: the restart
// store (internal/store) and the schedules (internal/schedule) both sit on it. It owns what
// any user of Variables needs and is easy to get subtly wrong: one path-escaping
// convention, typed errors (ErrNotFound, *PermissionError, *ConflictError, ErrLockHeld,
// ErrLockLost), check-and-set writes and deletes that recognise their own lost answers,
// variable locks, prefix listings (blocking ones for watches), and the retries.
//
// Retries: every request but the blocking ones and a lock's renewal is retried here, once,
// with cluster.Retry and cluster.IsTransient, so callers never wrap these calls in retries
// of their own. Watch loops use Watching, whose requests are tried once: a watch keeps
// going until its context ends and paces its own tries.
package nomadvars

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// Client reads and writes Nomad Variables through an api.Client.
type Client struct {
	api *api.Client
	// region is where requests go; "" is the api client's own region.
	region string
	// retry bounds the retries of one request; nil tries each request once (Watching).
	retry *cluster.RetryPolicy
	log   *slog.Logger
}

// Options configure a Client; the zero value is ready.
type Options struct {
	// Retry bounds the retries of one request; zero is DefaultRetryPolicy.
	Retry cluster.RetryPolicy
	// Logger receives the retries (debug); nil logs nothing.
	Logger *slog.Logger
}

// DefaultRetryPolicy is cluster.DefaultRetryPolicy with a shorter first backoff: one big
// restart record is dozens of requests, and a cluster failing a few percent of them should
// cost milliseconds, not seconds, while a leader election is still ridden out.
func DefaultRetryPolicy() cluster.RetryPolicy {
	p := cluster.DefaultRetryPolicy()
	p.Initial = 20 * time.Millisecond
	return p
}

// New returns a Client on client.
func New(client *api.Client, opts Options) *Client {
	p := opts.Retry
	if p == (cluster.RetryPolicy{}) {
		p = DefaultRetryPolicy()
	}
	return &Client{api: client, retry: &p, log: opts.Logger}
}

// Watching returns a Client on the same cluster whose requests are tried once: for watch
// loops, which keep trying until their context ends and would otherwise retry retries.
func (c *Client) Watching() *Client {
	return &Client{api: c.api, region: c.region, log: c.log}
}

// InRegion returns a Client on the same cluster, with the same retries, whose requests
// go to region ("" is the api client's own): Nomad forwards them to that region's servers.
// Variables live in one region; a job's templates may name another ("path@region").
func (c *Client) InRegion(region string) *Client {
	in := *c
	in.region = region
	return &in
}

// Namespace is the namespace a variable request names: Nomad's "default" for "".
func Namespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// Wait makes a read or a listing a blocking query: it answers once the index passes After,
// or when Time has passed. The zero Wait answers at once.
type Wait struct {
	After uint64
	Time  time.Duration
}

// Read returns the variable at path in namespace ns; ErrNotFound when there is none.
func (c *Client) Read(ctx context.Context, ns, path string) (*Variable, error) {
	v, _, err := c.ReadAfter(ctx, ns, path, Wait{})
	return v, err
}

// ReadAfter is Read as a blocking query (see Wait); it also returns the query's index.
func (c *Client) ReadAfter(ctx context.Context, ns, path string, w Wait) (*Variable, uint64, error) {
	v, index, err := query(ctx, c, opRead, ns, path, w, c.api.Variables().Read)
	return fromAPI(v), index, err
}

// List returns the metadata (path and indexes, no items) of the variables under prefix in
// namespace ns ("*": every namespace the token may list).
func (c *Client) List(ctx context.Context, ns, prefix string) ([]*Metadata, error) {
	metas, _, err := c.ListAfter(ctx, ns, prefix, Wait{})
	return metas, err
}

// ListAfter is List as a blocking query (see Wait); it also returns the listing's index.
func (c *Client) ListAfter(ctx context.Context, ns, prefix string, w Wait) ([]*Metadata, uint64, error) {
	metas, index, err := query(ctx, c, opList, ns, prefix, w, c.api.Variables().PrefixList)
	return metadataFromAPI(metas), index, err
}

// query runs one read of path (a variable, or a prefix to list) as do does, as a blocking
// query when w asks for one, and returns the answer with the query's index.
func query[T any](ctx context.Context, c *Client, op operation, ns, path string, w Wait,
	read func(string, *api.QueryOptions) (T, *api.QueryMeta, error)) (T, uint64, error) {
	type answer struct {
		value T
		index uint64
	}
	a, err := do(ctx, c, op, ns, path, func(ctx context.Context) (answer, error) {
		v, qm, err := read(path, c.queryOptions(ctx, ns, w))
		if err != nil {
			return answer{}, err
		}
		return answer{v, lastIndex(qm)}, nil
	})
	return a.value, a.index, err
}

// do runs one request, retried on transient failures unless c is Watching, and returns
// its error in the package's terms.
func do[T any](ctx context.Context, c *Client, op operation, ns, path string, req func(context.Context) (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	if c.retry == nil {
		v, err = req(ctx)
	} else {
		v, err = cluster.Retry(ctx, *c.retry, c.log, string(op)+" of variable "+path, req)
	}
	return v, classify(ctx, err, op, ns, path)
}

func (c *Client) queryOptions(ctx context.Context, ns string, w Wait) *api.QueryOptions {
	q := &api.QueryOptions{Namespace: ns, Region: c.region}
	if w.After > 0 {
		q.WaitIndex, q.WaitTime = w.After, w.Time
	}
	return q.WithContext(ctx)
}

func (c *Client) writeOptions(ctx context.Context, ns string) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: ns, Region: c.region}).WithContext(ctx)
}

func lastIndex(qm *api.QueryMeta) uint64 {
	if qm == nil {
		return 0
	}
	return qm.LastIndex
}
