package onchange

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// revertJob is a job whose group reverts, reading one variable, one key, a prefix and a
// path computed at render time.
func revertJob(onFailure string) JobSpec {
	text := `{{ with nomadVar "nomad/jobs/web/config" }}{{ .mode }}{{ end }}{{ key "web/flags" }}` +
		`{{ range ls "web/extra" }}{{ .Key }}{{ end }}{{ with nomadVar (printf "nomad/jobs/%s" (env "NOMAD_JOB_NAME")) }}{{ end }}`
	return JobSpec{ID: "web", Namespace: "default", Meta: map[string]string{KeyOnChange: "auto", KeyOnFailure: onFailure},
		Groups: []GroupSpec{{Name: "web", Count: 4, Tasks: []TaskSpec{{Name: "app",
			Templates: []TemplateSpec{{Embedded: text, DestPath: "local/app.env", ChangeMode: "noop"}}}}}}}
}

func TestOnFailureRevertSaysWhatCannotBeReverted(t *testing.T) {
	g := Analyze(revertJob("revert")).Groups[0]
	if len(g.Problems) != 0 || g.OnFailure != OnFailureRevert {
		t.Fatalf("problems %v, on-failure %q; want none and revert", g.Problems, g.OnFailure)
	}
	var reverts []string
	for _, w := range g.Watched {
		if g.Reverts(w.Source) {
			reverts = append(reverts, w.Source.Ref())
		}
	}
	if want := []string{"consul:web/flags", "nomad:nomad/jobs/web/config"}; !reflect.DeepEqual(slices.Sorted(slices.Values(reverts)), want) {
		t.Errorf("reverted sources = %v, want %v", reverts, want)
	}
	text := strings.Join(g.NotRevertible, "\n")
	for _, want := range []string{"consul:web/extra/: a prefix", `template "local/app.env" of task "app": followed by its re-renders`} {
		if !strings.Contains(text, want) {
			t.Errorf("NotRevertible = %q, want it to say %q", g.NotRevertible, want)
		}
	}
	stop := Analyze(revertJob("stop")).Groups[0]
	if len(stop.NotRevertible) != 0 || stop.Reverts(g.Watched[0].Source) {
		t.Errorf("a group with on-failure stop reverts or lists %v", stop.NotRevertible)
	}
}

func TestOnFailureInvalidIsAProblemAndNoRollout(t *testing.T) {
	g := Analyze(revertJob("undo")).Groups[0]
	if len(g.Problems) != 1 || g.Problems[0].Key != KeyOnFailure || g.Rolls() {
		t.Fatalf("problems = %v, rolls %v; want one on %s and no rollout", g.Problems, g.Rolls(), KeyOnFailure)
	}
	if got := g.Problems[0].String(); strings.Contains(got, "\n") || !strings.Contains(got, `job meta nomad-restart.on-failure = "undo"`) {
		t.Errorf("problem reads %q", got)
	}
}

func TestRestartedOntoListsTheAllocationsAskedToRestart(t *testing.T) {
	rec := &restart.Record{Allocs: []restart.AllocProgress{
		{ID: "a", State: restart.AllocFailed, Attempts: 1},
		{ID: "b", State: restart.AllocDone, Attempts: 1},
		{ID: "c", State: restart.AllocRestarting},
		{ID: "d", State: restart.AllocPending},
		{ID: "e", State: restart.AllocSkipped},
		{ID: "f", State: restart.AllocDone, Attempts: 1, Replacement: "f2"},
	}}
	if got, want := RestartedOnto(rec), []string{"a", "b", "c", "f2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RestartedOnto = %v, want %v", got, want)
	}
}

func TestDecideWriteBack(t *testing.T) {
	good := SourceValue{Index: 10, Items: map[string]string{"mode": "good", "port": "8080"}}
	held := Kept{State: KeptReverting, OldIndex: 10, BadIndex: 12, Value: good}
	tests := []struct {
		name string
		k    Kept
		cur  SourceValue
		want WriteBack
	}{
		{"still the bad value", held, SourceValue{Index: 12, Items: map[string]string{"mode": "bad", "port": "8080"}}, WriteNow},
		{"an earlier write-back landed", held, SourceValue{Index: 14, Items: map[string]string{"mode": "good", "port": "8080"}}, WrittenAlready},
		{"written back, as recorded", Kept{State: KeptReverted, BadIndex: 12, WrittenIndex: 14}, SourceValue{Index: 14}, WrittenAlready},
		{"changed by hand", held, SourceValue{Index: 14, Items: map[string]string{"mode": "hand"}}, ChangedSince},
		{"an item more", held, SourceValue{Index: 14, Items: map[string]string{"mode": "good", "port": "8080", "x": ""}}, ChangedSince},
		{"deleted since", held, SourceValue{}, ChangedSince},
		{"a key's flags differ", Kept{BadIndex: 3, Value: SourceValue{Index: 2, Bytes: []byte("good")}}, SourceValue{Index: 5, Bytes: []byte("good"), Flags: 1}, ChangedSince},
		{"a key's bytes back", Kept{BadIndex: 3, Value: SourceValue{Index: 2, Bytes: []byte("good")}}, SourceValue{Index: 5, Bytes: []byte("good")}, WrittenAlready},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.k.DecideWriteBack(tt.cur); got != tt.want {
				t.Errorf("DecideWriteBack = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestKeptProtectsARevertUnderWay(t *testing.T) {
	tests := []struct {
		k    Kept
		from uint64
		want bool
	}{
		{Kept{State: KeptHeld, BadIndex: 12}, 12, false},
		{Kept{State: KeptReverting, BadIndex: 12}, 12, true},
		{Kept{State: KeptReverted, BadIndex: 12, WrittenIndex: 14}, 12, true},  // the write-back itself
		{Kept{State: KeptReverted, BadIndex: 12, WrittenIndex: 14}, 14, false}, // a change after it
	}
	for _, tt := range tests {
		if got := tt.k.Protects(tt.from); got != tt.want {
			t.Errorf("%+v.Protects(%d) = %v, want %v", tt.k, tt.from, got, tt.want)
		}
	}
}

// Two changes before a rollout is filed are rolled as one: a failure of that rollout puts
// back the value the allocations ran before both, not the one between them, which no
// allocation loaded.
func TestKeepKeepsTheValueBeforeChangesNotYetRolled(t *testing.T) {
	good := SourceValue{Index: 10, Items: map[string]string{"mode": "good"}}
	bad1 := SourceValue{Index: 12, Items: map[string]string{"mode": "bad1"}}
	bad2 := SourceValue{Index: 14, Items: map[string]string{"mode": "bad2"}}
	keptGood := Kept{Source: "s", State: KeptHeld, OldIndex: 10, BadIndex: 12, Value: good}
	tests := []struct {
		name      string
		k         Kept
		idx       uint64
		prev, cur SourceValue
		want      Kept
		write     bool
	}{
		{"first change", Kept{}, 0, good, bad1, keptGood, true},
		{"a second change before any rollout of the first", keptGood, 7, bad1, bad2,
			Kept{Source: "s", State: KeptHeld, OldIndex: 10, BadIndex: 14, Value: good}, true},
		{"a change after the first was rolled", func() Kept { k := keptGood; k.RolledBy = "r1"; return k }(), 7, bad1, bad2,
			Kept{Source: "s", State: KeptHeld, OldIndex: 12, BadIndex: 14, Value: bad1}, true},
		{"a revert under way", Kept{State: KeptReverting, BadIndex: 12}, 7, bad1, bad2, Kept{State: KeptReverting, BadIndex: 12}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, write := Keep(tt.k, tt.idx, "s", tt.prev, tt.cur)
			if write != tt.write || got.OldIndex != tt.want.OldIndex || got.BadIndex != tt.want.BadIndex ||
				got.State != tt.want.State || !got.Value.SameContent(tt.want.Value) {
				t.Errorf("Keep = %+v, %v; want %+v, %v", got, write, tt.want, tt.write)
			}
		})
	}
}

// A kept value printed or logged by mistake, in any of the usual ways, shows no content.
func TestKeptValueNeverPrintsItsContent(t *testing.T) {
	k := Kept{Source: "nomad:nomad/jobs/web/config", State: KeptHeld, OldIndex: 3, BadIndex: 5,
		Value: SourceValue{Index: 3, Items: map[string]string{"password": "hunter2"}, Bytes: []byte("hunter2")}}
	var out strings.Builder
	slog.New(slog.NewJSONHandler(&out, nil)).Info("kept", "kept", k, "value", k.Value)
	slog.New(slog.NewTextHandler(&out, nil)).Info("kept", "kept", k, "value", k.Value)
	fmt.Fprintf(&out, "%v %+v %s %v %+v", k, k, k.Value, k.Value, &k.Value)
	if strings.Contains(out.String(), "hunter2") {
		t.Errorf("the kept value shows: %s", out.String())
	}
	if !strings.Contains(out.String(), "Index:3") {
		t.Errorf("the kept value's index is not shown: %s", out.String())
	}
}

func TestRevertIDIsTheRolloutsOwn(t *testing.T) {
	first, again := RevertID("r1"), RevertID("r"+"1")
	if first != again || first == RevertID("r2") || first == "r1" {
		t.Error("RevertID must be the same for a rollout and differ between rollouts")
	}
}

func TestKeptPathIsUnderTheProductsPrefix(t *testing.T) {
	src := Source{Kind: NomadVariable, Path: "nomad/jobs/web/config", Namespace: "prod"}
	got := KeptPath("nomad-restart/", src, strings.NewReplacer(" ", "_", "/", "~2F").Replace)
	if !strings.HasPrefix(got, "nomad-restart/~kept/") || strings.Count(got, "/") != 2 {
		t.Errorf("KeptPath = %q", got)
	}
}

func TestRevertNotesSayWhatAFailureWouldNotRevert(t *testing.T) {
	ex := Analyze(revertJob("revert"))
	triggers := []restart.Trigger{{Source: "nomad:nomad/jobs/web/config", NewIndex: 3}, {Source: "consul:web/extra/", NewIndex: 4},
		{Source: "rendered:app/local/app.env", Task: "app", Destination: "local/app.env"}}
	notes := RevertNotes(ex, []string{"web"}, triggers)
	if len(notes) != 2 || !strings.Contains(notes[0], "consul:web/extra/ cannot be reverted") || !strings.Contains(notes[1], `template "local/app.env" of task "app" cannot be reverted`) {
		t.Errorf("RevertNotes = %q", notes)
	}
	if notes := RevertNotes(Analyze(revertJob("stop")), []string{"web"}, triggers); len(notes) != 0 {
		t.Errorf("a group that stops on failure has notes %q", notes)
	}
}
