package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// recordsPrefix is where the restart store keeps its records. A Nomad prefix source that
// lies outside it does not count them as changes, as the agent's watch does not: a
// rollout's own writes must not look like changes of the configuration.
const recordsPrefix = "nomad-restart/"

// Words of the listing for what is not an index: stable, users grep for them.
const (
	noneNomad   = "none (missing, or not listable by this token)"
	noneConsul  = "none (missing, or not readable by this Consul token)"
	noConsul    = "unknown (no Consul configured)"
	noneRollout = "none"
)

// watchedJob is one job of `watches -json` and `watches -explain -json`: the explanation
// (its fields inline, as before) with the facts read from Nomad, Consul and the store.
type watchedJob struct {
	onchange.Explain
	// Sources are the distinct sources the job's groups watch (or would watch), each with
	// its last change.
	Sources []sourceFact
	// LastRollout is the job's newest config-change rollout; null when there is none, or
	// when it could not be read (then LastRolloutNote says why).
	LastRollout     *rolloutFact
	LastRolloutNote string `json:",omitempty"`
}

// sourceFact is a source and its last change; Note says why LastChange is null.
type sourceFact struct {
	Source     onchange.Source
	LastChange *changeFact
	Note       string `json:",omitempty"`
}

// changeFact is the newest change of what a source covers: Nomad's ModifyIndex and
// ModifyTime of the newest variable, or a Consul key's ModifyIndex (Time null: Consul
// keeps no time).
type changeFact struct {
	Index uint64
	Time  *time.Time
}

// rolloutFact names a restart record: its full ID and status.
type rolloutFact struct {
	ID     string
	Status restart.Status
}

// watchFacts reads the facts of the listing. It only reads: the variables' metadata
// listing (never a variable, so no read capability on secrets is needed), Consul keys,
// and the restart records. Answers are kept per source, which several jobs may share.
type watchFacts struct {
	nomad  *api.Client
	consul health.ConsulConfig
	stores []store.Store
	log    *slog.Logger

	consulClient *consulapi.Client
	consulErr    error
	// consulDown is the note of a Consul that did not answer, given to the sources after.
	consulDown string
	changes    map[onchange.Source]sourceFact
}

func newWatchFacts(nomad *api.Client, consul health.ConsulConfig, stores []store.Store, log *slog.Logger) *watchFacts {
	return &watchFacts{nomad: nomad, consul: consul, stores: stores, log: log, changes: map[onchange.Source]sourceFact{}}
}

// job reads the facts of one explained job.
func (f *watchFacts) job(ctx context.Context, e onchange.Explain) watchedJob {
	out := watchedJob{Explain: e, Sources: []sourceFact{}}
	for _, src := range distinctSources(e) {
		fact := f.change(ctx, src, e.Namespace)
		fact.Source = src // as the explanation names it
		out.Sources = append(out.Sources, fact)
	}
	out.LastRollout, out.LastRolloutNote = f.lastRollout(ctx, e.Namespace, e.JobID)
	return out
}

// distinctSources are the sources of every group of e, in order, each once.
func distinctSources(e onchange.Explain) []onchange.Source {
	var out []onchange.Source
	seen := map[onchange.Source]bool{}
	for _, g := range e.Groups {
		for _, w := range g.Watched {
			if !seen[w.Source] {
				seen[w.Source] = true
				out = append(out, w.Source)
			}
		}
	}
	return out
}

// change returns the last change of src, read once per command.
func (f *watchFacts) change(ctx context.Context, src onchange.Source, jobNamespace string) sourceFact {
	if src.Kind.Nomad() && src.Namespace == "" {
		src.Namespace = jobNamespace
	}
	if fact, ok := f.changes[src]; ok {
		return fact
	}
	var fact sourceFact
	if src.Kind.Nomad() {
		fact = f.nomadChange(ctx, src)
	} else {
		fact = f.consulChange(ctx, src)
	}
	f.changes[src] = fact
	return fact
}

// nomadChange lists the variables under the source's path (metadata only) and keeps the
// newest of those it covers. Nomad leaves out of a listing what the token may not list,
// so an empty answer cannot tell a missing variable from a hidden one.
func (f *watchFacts) nomadChange(ctx context.Context, src onchange.Source) sourceFact {
	fact := sourceFact{Source: src}
	metas, err := cluster.Retry(ctx, cluster.DefaultRetryPolicy(), f.log, "listing variables under "+src.Path,
		func(ctx context.Context) ([]*api.VariableMetadata, error) {
			q := (&api.QueryOptions{Namespace: src.Namespace, Region: src.Region}).WithContext(ctx)
			metas, _, err := f.nomad.Variables().PrefixList(src.Path, q)
			return metas, err
		})
	if err != nil {
		fact.Note = nomadListNote(src, err)
		return fact
	}
	fact.LastChange = newestVariable(metas, src)
	if fact.LastChange == nil {
		fact.Note = noneNomad
	}
	return fact
}

// nomadListNote words a failed listing: a 403 refuses the token itself (Nomad filters
// what a valid token may not list rather than refusing), so it names the rule to grant.
func nomadListNote(src onchange.Source, err error) string {
	if nomadvars.StatusOf(err) == http.StatusForbidden {
		path := src.Path
		if src.Kind == onchange.NomadPrefix {
			path += "*"
		}
		return fmt.Sprintf(`unknown (Nomad refused the listing: check the token; it needs namespace %q { variables { path %q { capabilities = ["list"] } } })`,
			nomadvars.Namespace(src.Namespace), path)
	}
	return fmt.Sprintf("unknown (listing variables under %q: %s)", src.Path, oneLine(err.Error()))
}

// newestVariable is the newest (highest ModifyIndex) of the variables src covers: its
// exact path for a variable, everything under its path for a prefix, leaving out the
// restart store's records unless the prefix itself lies among them. Nil when it covers
// none.
func newestVariable(metas []*api.VariableMetadata, src onchange.Source) *changeFact {
	skipRecords := !strings.HasPrefix(src.Path, recordsPrefix)
	var newest *api.VariableMetadata
	for _, m := range metas {
		switch {
		case m == nil:
			continue
		case src.Kind == onchange.NomadVariable && m.Path != src.Path:
			continue
		case !strings.HasPrefix(m.Path, src.Path):
			continue
		case skipRecords && strings.HasPrefix(m.Path, recordsPrefix):
			continue
		}
		if newest == nil || m.ModifyIndex > newest.ModifyIndex {
			newest = m
		}
	}
	if newest == nil {
		return nil
	}
	at := time.Unix(0, newest.ModifyTime).UTC()
	return &changeFact{Index: newest.ModifyIndex, Time: &at}
}

// consulChange reads a Consul key's ModifyIndex, or the newest of the keys under a
// prefix, as the agent's watch reads them (Consul's ?keys form answers names only).
func (f *watchFacts) consulChange(ctx context.Context, src onchange.Source) sourceFact {
	fact := sourceFact{Source: src}
	if f.consul.Address == "" {
		fact.Note = noConsul
		return fact
	}
	kv, err := f.consulKV()
	if err != nil {
		fact.Note = fmt.Sprintf("unknown (%s)", oneLine(err.Error()))
		return fact
	}
	if f.consulDown != "" {
		fact.Note = f.consulDown
		return fact
	}
	index, found, err := readConsulIndex(ctx, kv, src)
	switch {
	case err != nil:
		fact.Note = consulReadNote(src, err)
		if cluster.IsTransient(err) {
			f.consulDown = fact.Note // the next sources would wait as long for the same answer
		}
	case !found:
		fact.Note = noneConsul
	default:
		fact.LastChange = &changeFact{Index: index}
	}
	return fact
}

// consulKV makes the Consul client once, from the flags and the CONSUL_* environment.
func (f *watchFacts) consulKV() (*consulapi.KV, error) {
	if f.consulClient == nil && f.consulErr == nil {
		f.consulClient, _, f.consulErr = f.consul.Client(false)
	}
	if f.consulErr != nil {
		return nil, f.consulErr
	}
	return f.consulClient.KV(), nil
}

// consulReadPolicy bounds the retries of one Consul read: a listing is a one-shot look, and
// a Consul that is down (or a wrong address) must not hold it for the minute a driver
// would wait.
func consulReadPolicy() cluster.RetryPolicy {
	return cluster.RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, MaxElapsed: 2 * time.Second}
}

// readConsulIndex returns the newest ModifyIndex of the keys src covers and whether it
// covers any.
func readConsulIndex(ctx context.Context, kv *consulapi.KV, src onchange.Source) (uint64, bool, error) {
	q := (&consulapi.QueryOptions{Datacenter: src.Datacenter, Namespace: src.Namespace, Partition: src.Partition}).WithContext(ctx)
	read := func(ctx context.Context) (consulapi.KVPairs, error) {
		if src.Kind == onchange.ConsulKey {
			pair, _, err := kv.Get(src.Path, q.WithContext(ctx))
			if pair == nil {
				return nil, err
			}
			return consulapi.KVPairs{pair}, err
		}
		pairs, _, err := kv.List(src.Path, q.WithContext(ctx))
		return pairs, err
	}
	pairs, err := cluster.Retry(ctx, consulReadPolicy(), nil, "reading Consul keys under "+src.Path, read)
	if err != nil {
		return 0, false, err
	}
	var newest uint64
	for _, p := range pairs {
		newest = max(newest, p.ModifyIndex)
	}
	return newest, len(pairs) > 0, nil
}

// consulReadNote words a failed Consul read; a denial names the ACL rule to grant.
func consulReadNote(src onchange.Source, err error) string {
	var se consulapi.StatusError
	if errors.As(err, &se) && se.Code == http.StatusForbidden {
		rule := fmt.Sprintf(`key %q { policy = "read" }`, src.Path)
		if src.Kind == onchange.ConsulPrefix {
			rule = fmt.Sprintf(`key_prefix %q { policy = "read" }`, src.Path)
		}
		return fmt.Sprintf("unknown (Consul denied the read: grant the Consul token %s)", rule)
	}
	return fmt.Sprintf("unknown (reading Consul: %s; check -consul-address or CONSUL_HTTP_ADDR)", oneLine(err.Error()))
}

// lastRollout is the newest record of the job that config-change triggers started, over
// the stores `status` reads. A store that cannot be read makes the answer unknown rather
// than "none", which would be a guess.
func (f *watchFacts) lastRollout(ctx context.Context, namespace, job string) (*rolloutFact, string) {
	var newest *restart.Record
	for _, st := range f.stores {
		recs, err := st.List(ctx, store.Filter{Namespace: namespace, JobID: job})
		if err != nil {
			return nil, fmt.Sprintf("unknown (listing restarts in the %s store: %s)", st.Kind(), oneLine(err.Error()))
		}
		if r := newestTriggered(recs); r != nil && (newest == nil || r.CreateTime.After(newest.CreateTime)) {
			newest = r
		}
	}
	if newest == nil {
		return nil, ""
	}
	return &rolloutFact{ID: newest.ID, Status: newest.Status}, ""
}

// newestTriggered is the newest record (by CreateTime) that carries triggers: config-change
// rollouts do, an operator's restart does not.
func newestTriggered(recs []*restart.Record) *restart.Record {
	var newest *restart.Record
	for _, r := range recs {
		if len(r.Triggers) > 0 && (newest == nil || r.CreateTime.After(newest.CreateTime)) {
			newest = r
		}
	}
	return newest
}

// changeText is a source's last change in a table cell.
func changeText(f sourceFact) string {
	switch {
	case f.LastChange == nil:
		return f.Note
	case f.LastChange.Time == nil:
		return fmt.Sprintf("index %d", f.LastChange.Index)
	}
	return fmt.Sprintf("index %d at %s", f.LastChange.Index, formatTime(*f.LastChange.Time))
}

// rolloutText is the job's last rollout in a table cell: short ID and status.
func (j watchedJob) rolloutText() string {
	switch {
	case j.LastRollout != nil:
		return fmt.Sprintf("%s (%s)", shortID(j.LastRollout.ID, false), j.LastRollout.Status)
	case j.LastRolloutNote != "":
		return j.LastRolloutNote
	}
	return noneRollout
}

// sourceFactOf finds src's fact among the job's.
func (j watchedJob) sourceFactOf(src onchange.Source) (sourceFact, bool) {
	for _, f := range j.Sources {
		if f.Source == src {
			return f, true
		}
	}
	return sourceFact{}, false
}
