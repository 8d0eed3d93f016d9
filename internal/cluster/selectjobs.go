package cluster

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	// JobModifyIndex moves when the job's specification changes (a new version), not
	// when its allocations or status do.
	JobModifyIndex uint64
}

// FilterError says Nomad could not read or apply a filter expression on its jobs list.
// Message is Nomad's own text, which says where the expression goes wrong.
type FilterError struct {
	Expr    string
	Message string
}

// Error is one line, as it is shown in a table's cell or a schedule's last reason: Nomad
// writes each of several parse errors on a line of its own, and an expression with a
// newline or an invisible character in it is quoted.
func (e *FilterError) Error() string {
	expr := "'" + e.Expr + "'"
	if !utf8.ValidString(e.Expr) || strings.IndexFunc(e.Expr, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		expr = strconv.Quote(e.Expr)
	}
	lines := strings.Split(strings.TrimSpace(e.Message), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return fmt.Sprintf("Nomad refused the filter expression %s: %s", expr, strings.Join(lines, "; "))
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
		Meta: meta, JobModifyIndex: s.JobModifyIndex,
	}
}

// JobLister lists the cluster's jobs: selected by a filter (fleets), or followed with
// blocking queries (config-change rollouts). *Nomad implements it.
type JobLister interface {
	// SelectJobs lists the jobs of namespace ("*" for every namespace the token may list)
	// that filter (Nomad's filter expression, "" for all) selects, with their meta; a bad
	// expression is a *FilterError.
	SelectJobs(ctx context.Context, namespace, filter string) ([]JobStub, error)
	// WatchJobs lists the jobs of namespace ("" or "*" for every namespace the token may
	// list) once the jobs' index passes index, or when wait has passed (index 0 answers at
	// once), with the index to wait on next. It is tried once: the caller's watch paces and
	// retries (Watch).
	WatchJobs(ctx context.Context, namespace string, index uint64, wait time.Duration) ([]JobStub, uint64, error)
}

var _ JobLister = (*Nomad)(nil)

// WatchJobs implements JobLister.
func (n *Nomad) WatchJobs(ctx context.Context, namespace string, index uint64, wait time.Duration) ([]JobStub, uint64, error) {
	if namespace == "" {
		namespace = api.AllNamespacesNamespace
	}
	q := (&api.QueryOptions{Namespace: namespace, WaitIndex: index, WaitTime: wait}).WithContext(ctx)
	stubs, meta, err := n.client.Jobs().List(q)
	if err != nil {
		return nil, 0, fmt.Errorf("listing jobs in namespace %q: %w", nsName(namespace), classify(err, nil))
	}
	out := make([]JobStub, 0, len(stubs))
	for _, s := range stubs {
		out = append(out, jobStubOf(s, namespace))
	}
	return out, meta.LastIndex, nil
}
