package changereport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

func TestNewestTriggered(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	trig := []restart.Trigger{{Source: "nomad:nomad/jobs/web/config", NewIndex: 9}}
	recs := []*restart.Record{
		{ID: "operator-newest", CreateTime: at.Add(3 * time.Minute)},
		{ID: "rollout-older", CreateTime: at, Triggers: trig},
		{ID: "rollout-newer", CreateTime: at.Add(time.Minute), Triggers: trig},
	}
	if got := newestTriggered(recs); got == nil || got.ID != "rollout-newer" {
		t.Errorf("newest triggered = %+v, want rollout-newer", got)
	}
	if got := newestTriggered(recs[:1]); got != nil {
		t.Errorf("a restart without triggers is no rollout, got %+v", got)
	}
}

// failingStore is a store whose listing fails: the last rollout is then unknown, not
// "none".
type failingStore struct{ store.Store }

func (failingStore) Kind() string { return "nomad" }
func (failingStore) List(context.Context, store.Filter) ([]*restart.Record, error) {
	return nil, errors.New("connection refused")
}

func TestLastRolloutUnknownWhenAStoreFails(t *testing.T) {
	f := Facts{Stores: []store.Store{failingStore{}}}
	got, note := f.lastRollout(context.Background(), "default", "web")
	if got != nil || !strings.HasPrefix(note, "unknown (listing restarts in the nomad store: connection refused") {
		t.Errorf("got %+v, note %q", got, note)
	}
	if text := (WatchedJob{LastRolloutNote: note}).rolloutText(); text != note {
		t.Errorf("cell = %q, want the note", text)
	}
}

func TestFactTexts(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	consulTree := onchange.Source{Kind: onchange.ConsulPrefix, Path: "web/"}
	nomadTree := onchange.Source{Kind: onchange.NomadPrefix, Path: "nomad/jobs/", Namespace: "team"}
	denied := func(src onchange.Source, err error) error { return &sourcewatch.DeniedError{Source: src, Err: err} }
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"nomad change", changeText(sourceFact{LastChange: &changeFact{Index: 42, Time: &at}}), "index 42 at " + output.FormatTime(at)},
		{"consul change", changeText(sourceFact{LastChange: &changeFact{Index: 7}}), "index 7"},
		{"missing", changeText(sourceFact{Note: NoneNomad}), NoneNomad},
		{"rollout", (WatchedJob{LastRollout: &rolloutFact{ID: "0b0c3e52-7a3f-4a55-9d3e-2f4c6a1b9e10", Status: restart.StatusRunning}}).rolloutText(), "0b0c3e52 (running)"},
		{"no rollout", (WatchedJob{}).rolloutText(), "none"},
		{"consul denied", sourceNote(consulTree, denied(consulTree, consulapi.StatusError{Code: 403, Body: "Permission denied"})),
			`unknown (Consul denied the read: grant the Consul token key_prefix "web/" { policy = "read" })`},
		{"nomad denied", sourceNote(nomadTree, denied(nomadTree, errors.New("Permission denied"))),
			`unknown (Nomad refused the listing: check the token; it needs namespace "team" { variables { path "nomad/jobs/*" { capabilities = ["list"] } } })`},
		{"no consul", sourceNote(consulTree, fmt.Errorf("reading: %w", sourcewatch.ErrNoConsul)), NoConsul},
		{"nomad failed", sourceNote(nomadTree, errors.New("boom\nagain")), `unknown (listing variables under "nomad/jobs/": boom again)`},
		{"consul failed", sourceNote(consulTree, errors.New("refused")), "unknown (reading Consul: refused; check -consul-address or CONSUL_HTTP_ADDR)"},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// TestNewSourceFact checks how a source's State becomes its fact: an index with Nomad's
// time, an index alone from Consul, a note for none or for an error.
func TestNewSourceFact(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	nomad := onchange.Source{Kind: onchange.NomadVariable, Path: "nomad/jobs/web/config", Namespace: "default"}
	consul := onchange.Source{Kind: onchange.ConsulKey, Path: "web/config"}
	cases := []struct {
		name string
		got  sourceFact
		want string
	}{
		{"nomad", newSourceFact(nomad, sourcewatch.State{Index: 42, Count: 1, ChangedAt: at}), "index 42 at " + output.FormatTime(at)},
		{"consul", newSourceFact(consul, sourcewatch.State{Index: 7, Count: 1}), "index 7"},
		{"nomad none", newSourceFact(nomad, sourcewatch.State{}), NoneNomad},
		{"consul none", newSourceFact(consul, sourcewatch.State{}), NoneConsul},
		{"no consul", newSourceFact(consul, sourcewatch.State{Err: sourcewatch.ErrNoConsul}), NoConsul},
	}
	for _, tc := range cases {
		if got := changeText(tc.got); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	if f := newSourceFact(nomad, sourcewatch.State{Index: 42, Count: 1, ChangedAt: at}); f.LastChange.Time.Location() != time.UTC {
		t.Errorf("a Nomad time is kept in %s, want UTC as before", f.LastChange.Time.Location())
	}
}
