package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

func TestNewestVariable(t *testing.T) {
	meta := func(path string, index uint64) *api.VariableMetadata {
		return &api.VariableMetadata{Path: path, ModifyIndex: index, ModifyTime: int64(index) * int64(time.Second)}
	}
	listing := []*api.VariableMetadata{
		meta("nomad/jobs/web", 5),
		meta("nomad/jobs/web/config", 7),
		meta("nomad/jobs/web/config2", 12),
		meta("nomad/jobs/web/extra", 9),
		meta("nomad/jobs/webapp", 30),
		meta("nomad-restart/web/0b0c3e52", 40),
		nil,
	}
	exact := func(path string) onchange.Source { return onchange.Source{Kind: onchange.NomadVariable, Path: path} }
	prefix := func(path string) onchange.Source { return onchange.Source{Kind: onchange.NomadPrefix, Path: path} }
	cases := []struct {
		name string
		src  onchange.Source
		want uint64 // 0: covers nothing
	}{
		{"exact path only, not one that extends it", exact("nomad/jobs/web/config"), 7},
		{"exact path missing", exact("nomad/jobs/web/nosuch"), 0},
		{"prefix with its slash", prefix("nomad/jobs/web/"), 12},
		{"prefix without a slash reaches the names that extend it", prefix("nomad/jobs/web"), 30},
		{"the whole namespace, without the restart records", prefix(""), 30},
		{"a prefix among the records counts them", prefix("nomad-restart/"), 40},
		{"prefix covering nothing", prefix("other/"), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := newestVariable(listing, tc.src)
			switch {
			case tc.want == 0 && got != nil:
				t.Errorf("got index %d, want nothing covered", got.Index)
			case tc.want == 0:
			case got == nil:
				t.Errorf("got nothing, want index %d", tc.want)
			case got.Index != tc.want || got.Time == nil || !got.Time.Equal(time.Unix(int64(tc.want), 0)):
				t.Errorf("got %d at %v, want %d at %v", got.Index, got.Time, tc.want, time.Unix(int64(tc.want), 0))
			}
		})
	}
}

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
	f := newWatchFacts(nil, health.ConsulConfig{}, []store.Store{failingStore{}}, nil)
	got, note := f.lastRollout(context.Background(), "default", "web")
	if got != nil || !strings.HasPrefix(note, "unknown (listing restarts in the nomad store: connection refused") {
		t.Errorf("got %+v, note %q", got, note)
	}
	if text := (watchedJob{LastRolloutNote: note}).rolloutText(); text != note {
		t.Errorf("cell = %q, want the note", text)
	}
}

func TestFactTexts(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"nomad change", changeText(sourceFact{LastChange: &changeFact{Index: 42, Time: &at}}), "index 42 at " + formatTime(at)},
		{"consul change", changeText(sourceFact{LastChange: &changeFact{Index: 7}}), "index 7"},
		{"missing", changeText(sourceFact{Note: noneNomad}), noneNomad},
		{"rollout", (watchedJob{LastRollout: &rolloutFact{ID: "0b0c3e52-7a3f-4a55-9d3e-2f4c6a1b9e10", Status: restart.StatusRunning}}).rolloutText(), "0b0c3e52 (running)"},
		{"no rollout", (watchedJob{}).rolloutText(), "none"},
		{"consul denied", consulReadNote(onchange.Source{Kind: onchange.ConsulPrefix, Path: "web/"}, consulapi.StatusError{Code: 403, Body: "Permission denied"}),
			`unknown (Consul denied the read: grant the Consul token key_prefix "web/" { policy = "read" })`},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
