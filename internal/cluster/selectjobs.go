package cluster

import (
	"context"
	"fmt"
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"
)

// JobStub is a job as Nomad's jobs list describes it: enough to select the jobs of a fleet
// and read the options their own meta gives.
type JobStub struct {
	Namespace string
	ID        string
	Name      string
	Type      string
	Priority  int
	Status    string
	Stop      bool
	// Periodic and ParameterizedJob mark a job that launches others rather than running
	// allocations itself; ParentID names the job a launched one came from ("" otherwise).
	Periodic         bool
	ParameterizedJob bool
	ParentID         string
	// Meta is the job's own meta (not its groups' or tasks'); nil when it has none.
	Meta map[string]string
}

// FilterError says Nomad could not read or apply a filter expression on its jobs list.
// Message is Nomad's own text, which says where the expression goes wrong.
type FilterError struct {
	Expr    string
	Message string
}

func (e *FilterError) Error() string {
	return fmt.Sprintf("Nomad refused the filter expression '%s': %s", e.Expr, e.Message)
}

// SelectJobs lists the jobs of namespace ("*" for every namespace the token may list) that
// filter selects ("" for every job), by namespace then ID, each with its meta. Nomad
// evaluates filter on the jobs themselves (so Meta.team == "core" works), with its
// go-bexpr syntax; an expression it cannot read or apply is a *FilterError, and a token
// without list-jobs is ErrPermissionDenied.
func (n *Nomad) SelectJobs(ctx context.Context, namespace, filter string) ([]JobStub, error) {
	withMeta := &api.JobListOptions{Fields: &api.JobListFields{Meta: true}}
	stubs, err := read(ctx, n, "listing jobs", func(ctx context.Context) ([]*api.JobListStub, error) {
		q := queryOpts(ctx, namespace)
		q.Filter = filter
		s, _, err := n.client.Jobs().ListOptions(withMeta, q)
		return s, err
	})
	if err != nil {
		if filter != "" && statusCode(err) == http.StatusBadRequest {
			return nil, &FilterError{Expr: filter, Message: responseBody(err)}
		}
		return nil, fmt.Errorf("listing jobs in namespace %q: %w", nsName(namespace), classify(err, nil))
	}
	out := make([]JobStub, 0, len(stubs))
	for _, s := range stubs {
		out = append(out, jobStubOf(s, namespace))
	}
	// The api client sorts the list by ID alone, whatever the namespaces.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// jobStubOf converts Nomad's stub of a job listed in namespace.
func jobStubOf(s *api.JobListStub, namespace string) JobStub {
	ns := stubNamespace(s)
	if ns == "" {
		ns = nsName(namespace)
	}
	var meta map[string]string
	if len(s.Meta) > 0 {
		meta = s.Meta
	}
	return JobStub{
		Namespace: ns, ID: s.ID, Name: s.Name, Type: s.Type, Priority: s.Priority, Status: s.Status,
		Stop: s.Stop, Periodic: s.Periodic, ParameterizedJob: s.ParameterizedJob, ParentID: s.ParentID,
		Meta: meta,
	}
}
