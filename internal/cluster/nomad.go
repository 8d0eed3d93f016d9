package cluster

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// DefaultWatchWait is the wait of each blocking query. Nomad caps waits at 5 minutes
// (structs.MaxBlockingRPCQueryTime) and adds up to 1/16 of jitter; 5 minutes (Nomad's own
// default) keeps idle watches cheap while staying under proxies' usual idle timeouts. The
// client's Guard waits that long, the jitter and the request timeout for an answer.
const DefaultWatchWait = 5 * time.Minute

// Options tune a Nomad cluster client. The zero value is usable.
type Options struct {
	// Region is the region the client talks to, as given by -region or NOMAD_REGION.
	// Empty: learned from the first job read, else from the agent.
	Region string
	// Namespace is the client's namespace, as given by -namespace or NOMAD_NAMESPACE,
	// where a request that names none goes (the api client keeps it to itself).
	Namespace string
	// Retry bounds retries of reads on transient errors; zero: DefaultRetryPolicy().
	Retry RetryPolicy
	// WatchWait is the wait of each blocking query; zero: DefaultWatchWait.
	WatchWait time.Duration
	// Logger receives debug lines about retries; nil discards them.
	Logger *slog.Logger
	// MaxBlocking bounds the blocking queries (watches) in flight at once; zero:
	// DefaultMaxBlocking. See DefaultMaxBlocking.
	MaxBlocking int
}

// DefaultMaxBlocking is how many blocking queries one process holds open at once. Nomad
// counts each as an open connection and refuses a client address more than
// limits.http_max_conns_per_client (100 by default) with 429 "Your IP is issuing too many
// concurrent connections": a driver watching a batch of 100 allocations one blocking query
// each, plus its other requests, passed it on a real agent and lost its lease (whose
// renewals were refused). A watch waits for a slot; the ones waiting are for allocations
// already acted on, which change soon and free their slot, so no watch waits for ever.
const DefaultMaxBlocking = 32

// Nomad implements Cluster with the official github.com/hashicorp/nomad/api client.
// It is safe for concurrent use.
type Nomad struct {
	client *api.Client
	retry  RetryPolicy
	wait   time.Duration
	log    *slog.Logger

	// blocking holds a token per blocking query in flight (Options.MaxBlocking).
	blocking chan struct{}

	namespace string

	mu     sync.Mutex
	region string
	// maxCount is the servers' job_max_count once maxCountKnown (see jobMaxCount).
	maxCount      int
	maxCountKnown bool
}

var _ Cluster = (*Nomad)(nil)

// NewNomad returns a Cluster backed by client, with default options.
func NewNomad(client *api.Client) *Nomad {
	return NewNomadWithOptions(client, Options{})
}

// NewNomadWithOptions returns a Cluster backed by client.
func NewNomadWithOptions(client *api.Client, opts Options) *Nomad {
	if opts.MaxBlocking <= 0 {
		opts.MaxBlocking = DefaultMaxBlocking
	}
	n := &Nomad{client: client, retry: opts.Retry, wait: opts.WatchWait, log: opts.Logger, region: opts.Region,
		namespace: opts.Namespace, blocking: make(chan struct{}, opts.MaxBlocking)}
	if n.retry == (RetryPolicy{}) {
		n.retry = DefaultRetryPolicy()
	}
	if n.wait <= 0 {
		n.wait = DefaultWatchWait
	}
	if n.log == nil {
		n.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return n
}

// watchWait is a blocking query's wait: the client's, or less when ctx ends sooner. Nomad
// does not end a blocking query whose client went away: it keeps the connection, counted
// against the client address's limit, until the wait ends. A wait no longer than the
// caller's deadline frees it when the caller gives up.
func (n *Nomad) watchWait(ctx context.Context) time.Duration {
	w := n.wait
	if dl, ok := ctx.Deadline(); ok {
		w = min(w, max(time.Until(dl), 10*time.Millisecond))
	}
	return w
}

// holdBlocking takes a slot for a blocking query, waiting for one while ctx lasts; the
// caller releases it when the query answered.
func (n *Nomad) holdBlocking(ctx context.Context) (release func(), err error) {
	select {
	case n.blocking <- struct{}{}:
		return func() { <-n.blocking }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Client returns the api client, for callers that need an endpoint Cluster does not cover.
func (n *Nomad) Client() *api.Client { return n.client }

// Namespace is the namespace of a request that names none: Options.Namespace, else
// "default".
func (n *Nomad) Namespace() string {
	if n.namespace == "" {
		return "default"
	}
	return n.namespace
}

// Region is the region the client talks to: Options.Region, else the region of the jobs
// read so far, else the agent's region (asked once), else "".
func (n *Nomad) Region() string {
	n.mu.Lock()
	r := n.region
	n.mu.Unlock()
	if r != "" {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var self api.AgentSelf
	if _, err := n.client.Raw().Query("/v1/agent/self", &self, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		n.log.Debug("cannot learn the agent's region", "err", err)
		return ""
	}
	if v, ok := self.Config["Region"].(string); ok && v != "" {
		n.learnRegion(v)
		return v
	}
	return ""
}

// learnRegion records the region Nomad reported, unless one is already known.
func (n *Nomad) learnRegion(region string) {
	if region == "" {
		return
	}
	n.mu.Lock()
	if n.region == "" {
		n.region = region
	}
	n.mu.Unlock()
}

// queryOpts returns query options bound to ctx in namespace ("" keeps the client's).
func queryOpts(ctx context.Context, namespace string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
}

// watchQuery is the query options of a read in namespace; with waitIndex set, a blocking
// query that waits for an index past it (the watch's wait at most), holding one of the
// blocking-query slots until release. release is a no-op for a plain read.
func (n *Nomad) watchQuery(ctx context.Context, namespace string, waitIndex uint64) (q *api.QueryOptions, release func(), err error) {
	q = queryOpts(ctx, namespace)
	if waitIndex == 0 {
		return q, func() {}, nil
	}
	q.WaitIndex, q.WaitTime = waitIndex, n.watchWait(ctx)
	release, err = n.holdBlocking(ctx)
	return q, release, err
}

// watchRead is a read (retried as read retries) of get's answer and Nomad's index after it;
// with waitIndex set, a blocking query for an index past it (see watchQuery).
func watchRead[T any](ctx context.Context, n *Nomad, what, namespace string, waitIndex uint64, get func(*api.QueryOptions) (T, *api.QueryMeta, error)) (T, uint64, error) {
	type answer struct {
		v     T
		index uint64
	}
	a, err := read(ctx, n, what, func(ctx context.Context) (answer, error) {
		q, release, err := n.watchQuery(ctx, namespace, waitIndex)
		if err != nil {
			return answer{}, err
		}
		defer release()
		v, qm, err := get(q)
		if err != nil {
			return answer{}, err
		}
		return answer{v, qm.LastIndex}, nil
	})
	return a.v, a.index, err
}

// read runs an idempotent read with the retry policy.
func read[T any](ctx context.Context, n *Nomad, what string, op func(context.Context) (T, error)) (T, error) {
	return retry(ctx, n.retry, n.log, what, IsTransient, op)
}

// write runs a write, sending it again only when it provably never reached Nomad.
func write[T any](ctx context.Context, n *Nomad, what string, op func(context.Context) (T, error)) (T, error) {
	return retry(ctx, n.retry, n.log, what, notSent, op)
}
