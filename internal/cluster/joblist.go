package cluster

import (
	"context"
	"fmt"
	"sort"

	"github.com/hashicorp/nomad/api"
)

// JobRef names one job of a listing.
type JobRef struct {
	Namespace string
	ID        string
	// ParentID is the periodic or parameterized job this one was launched from; "" for a
	// job that was registered.
	ParentID string
}

// ListJobs lists the jobs of namespace ("*" for every namespace the token may read), by
// namespace then ID. Nomad's list answers with stubs; read a job's specification with
// JobSpec.
func (n *Nomad) ListJobs(ctx context.Context, namespace string) ([]JobRef, error) {
	stubs, err := read(ctx, n, "listing jobs", func(ctx context.Context) ([]*api.JobListStub, error) {
		s, _, err := n.client.Jobs().List(queryOpts(ctx, namespace))
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing jobs in namespace %q: %w", nsName(namespace), classify(err, nil))
	}
	out := make([]JobRef, 0, len(stubs))
	for _, s := range stubs {
		ns := stubNamespace(s)
		if ns == "" {
			ns = nsName(namespace)
		}
		out = append(out, JobRef{Namespace: ns, ID: s.ID, ParentID: s.ParentID})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
