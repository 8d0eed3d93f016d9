package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// ErrOtherCluster says a restart belongs to another Nomad cluster than the one in use.
var ErrOtherCluster = errors.New("restart belongs to another Nomad cluster")

// OtherClusterError refuses a restart filed against another cluster.
type OtherClusterError struct {
	ID, Cluster, Current string
}

func (e *OtherClusterError) Error() string {
	return fmt.Sprintf("restart %s belongs to the Nomad cluster at %s, not %s: pass -address %s (or set NOMAD_ADDR) to see or steer it",
		shortID(e.ID), e.Cluster, e.Current, e.Cluster)
}

func (e *OtherClusterError) Unwrap() error { return ErrOtherCluster }

// clusterScoped is a store shared by several clusters (the local one) seen from one: it
// stamps the records it creates with the cluster and hides, or refuses, those of others.
// Records stamped with no cluster (written before the stamp existed) are everyone's.
type clusterScoped struct {
	Store
	cluster string
}

// ScopeToCluster returns s as seen from the Nomad cluster named cluster (its address, see
// ClusterName). Scoping a scoped store again keeps the first scope.
func ScopeToCluster(s Store, cluster string) Store {
	if _, ok := s.(*clusterScoped); ok || cluster == "" {
		return s
	}
	return &clusterScoped{Store: s, cluster: cluster}
}

// ClusterName is how a cluster is named in records: its address, without a trailing slash.
func ClusterName(address string) string {
	return strings.TrimRight(strings.TrimSpace(address), "/")
}

func (c *clusterScoped) foreign(rec *restart.Record) bool {
	return rec.Cluster != "" && rec.Cluster != c.cluster
}

func (c *clusterScoped) Create(ctx context.Context, rec *restart.Record) error {
	if rec.Cluster == "" {
		rec.Cluster = c.cluster
	}
	return c.Store.Create(ctx, rec)
}

func (c *clusterScoped) CreateLeased(ctx context.Context, rec *restart.Record, holder string) (Lease, error) {
	if rec.Cluster == "" {
		rec.Cluster = c.cluster
	}
	return c.Store.CreateLeased(ctx, rec, holder)
}

func (c *clusterScoped) Get(ctx context.Context, namespace, id string) (*restart.Record, error) {
	rec, err := c.Store.Get(ctx, namespace, id)
	if err == nil && c.foreign(rec) {
		return nil, &OtherClusterError{ID: rec.ID, Cluster: rec.Cluster, Current: c.cluster}
	}
	return rec, err
}

func (c *clusterScoped) Find(ctx context.Context, namespace, prefix string) (*restart.Record, error) {
	rec, err := c.Store.Find(ctx, namespace, prefix)
	if err == nil && c.foreign(rec) {
		return nil, &OtherClusterError{ID: rec.ID, Cluster: rec.Cluster, Current: c.cluster}
	}
	return rec, err
}

func (c *clusterScoped) List(ctx context.Context, f Filter) ([]*restart.Record, error) {
	recs, err := c.Store.List(ctx, f)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if !c.foreign(r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Watch refuses a foreign record like Get: a follower must not follow another cluster's.
func (c *clusterScoped) Watch(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	rec, err := c.Store.Watch(ctx, namespace, id, afterIndex)
	if err == nil && c.foreign(rec) {
		return nil, &OtherClusterError{ID: rec.ID, Cluster: rec.Cluster, Current: c.cluster}
	}
	return rec, err
}

// WatchHead refuses a foreign record like Watch.
func (c *clusterScoped) WatchHead(ctx context.Context, namespace, id string, afterIndex uint64) (*restart.Record, error) {
	rec, err := c.Store.WatchHead(ctx, namespace, id, afterIndex)
	if err == nil && c.foreign(rec) {
		return nil, &OtherClusterError{ID: rec.ID, Cluster: rec.Cluster, Current: c.cluster}
	}
	return rec, err
}
