package page

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// fakeSource is a Source of fixed records, for the handlers' tests; it never changes.
type fakeSource struct {
	restarts []*restart.Record
	fleets   []*fleet.Record
	noFleets bool
	changed  int // calls of Changed
}

func (s *fakeSource) Restarts(context.Context) ([]*restart.Record, error) { return s.restarts, nil }

func (s *fakeSource) Restart(_ context.Context, id string) (*restart.Record, error) {
	for _, r := range s.restarts {
		if strings.HasPrefix(r.ID, id) {
			return r, nil
		}
	}
	return nil, store.ErrNotFound
}

func (s *fakeSource) Fleets() ([]*fleet.Record, error) {
	if s.noFleets {
		return nil, ErrNoFleets
	}
	return s.fleets, nil
}

func (s *fakeSource) Fleet(_ context.Context, id string) (*fleet.Record, error) {
	if s.noFleets {
		return nil, ErrNoFleets
	}
	for _, r := range s.fleets {
		if strings.HasPrefix(r.ID, id) {
			return r, nil
		}
	}
	return nil, store.ErrFleetNotFound
}

func (s *fakeSource) Next() <-chan struct{}      { return make(chan struct{}) }
func (s *fakeSource) Changed()                   { s.changed++ }
func (s *fakeSource) Stale() (time.Time, string) { return time.Time{}, "" }
func (s *fakeSource) Stopped() <-chan struct{}   { return nil }
func (s *fakeSource) Holder() string             { return "agent-1" }
func (s *fakeSource) Now() time.Time             { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
func (s *fakeSource) serve(cfg Config, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	New(s, cfg).ServeHTTP(w, req)
	return w
}

// fakeSteerer records what it was asked and answers with the record's head, or err.
type fakeSteerer struct {
	kind     steer.Kind
	asked    []string // "verb namespace id by"
	answered []string // the restarts an answer was passed on to
	err      error
}

func (s *fakeSteerer) intent(verb, ns, id, by string, st restart.Status) (steer.Head, error) {
	s.asked = append(s.asked, strings.Join([]string{verb, ns, id, by}, " "))
	if s.err != nil {
		return steer.Head{}, s.err
	}
	return steer.Head{Kind: s.kind, ID: id, Namespace: ns, Status: st}, nil
}

func (s *fakeSteerer) Pause(_ context.Context, ns, id, by string) (steer.Head, error) {
	return s.intent("pause", ns, id, by, restart.StatusRunning)
}

func (s *fakeSteerer) Resume(_ context.Context, ns, id, by string) (steer.Head, error) {
	return s.intent("resume", ns, id, by, restart.StatusPaused)
}

func (s *fakeSteerer) Cancel(_ context.Context, ns, id, by string) (steer.Head, error) {
	return s.intent("cancel", ns, id, by, restart.StatusCanceled)
}

func (s *fakeSteerer) Answer(_ context.Context, ns, id, answer, by string) (steer.Answered, error) {
	_, err := s.intent("answer "+answer, ns, id, by, "")
	return steer.Answered{Restarts: s.answered}, err
}

// Restarts and fleets go through one action handler: each is found, checked and steered
// with the request's token by its kind's steerer, and the page answers with its kind's
// words (a restart's answer carries its status); what a kind cannot do is refused with
// the command to use.
func TestActionsOfEachKind(t *testing.T) {
	q := &restart.Question{ID: "q1", Kind: restart.QuestionIgnoreError, Text: "Proceed?", Options: "y/N", Default: "no"}
	running := &restart.Record{ID: "11111111-aaaa", Namespace: "prod", JobID: "web", Status: restart.StatusRunning}
	asking := &restart.Record{ID: "22222222-bbbb", Namespace: "prod", JobID: "api", Status: restart.StatusWaiting, Question: q}
	ended := &restart.Record{ID: "33333333-cccc", Namespace: "prod", JobID: "db", Status: restart.StatusSucceeded}
	fl := &fleet.Record{Fleet: fleet.Fleet{ID: "44444444-dddd", Status: restart.StatusRunning}, Namespace: "default"}
	denied := &store.PermissionError{Capability: "write", Namespace: "prod", Path: "nomad-restart/web/1111", Prefix: "nomad-restart"}
	tests := []struct {
		name                       string
		path                       string
		body                       string
		noFleets                   bool
		noFleetSteering, noActions bool
		answered                   []string
		err                        error
		status                     int
		says                       string // the whole JSON answer, or a part of an error
		asked                      string // what the steerer was asked ("" for nothing)
	}{
		{name: "a restart's pause", path: "/restart/1111/pause", status: http.StatusOK,
			says:  `{"message":"Pause requested: the batch in flight finishes, then the restart holds.","status":"running"}` + "\n",
			asked: "pause prod 11111111-aaaa page of agent-1"},
		{name: "a restart's cancel", path: "/restart/1111/cancel", status: http.StatusOK,
			says:  `{"message":"Cancel requested: no more allocations will be restarted.","status":"canceled"}` + "\n",
			asked: "cancel prod 11111111-aaaa page of agent-1"},
		{name: "a restart's answer", path: "/restart/2222/answer", body: `{"Answer":"yes"}`, status: http.StatusOK,
			says: `{"message":"Answer recorded.","status":"waiting"}` + "\n", asked: "answer yes prod 22222222-bbbb page of agent-1"},
		{name: "an answer the question does not take", path: "/restart/2222/answer", body: `{"Answer":"maybe"}`, status: http.StatusBadRequest, says: "maybe"},
		// An empty answer is an unset variable in a script, never the question's default.
		{name: "an empty answer", path: "/restart/2222/answer", body: `{}`, status: http.StatusBadRequest, says: "it is empty; answer y"},
		{name: "a blank answer", path: "/restart/2222/answer", body: `{"Answer":" "}`, status: http.StatusBadRequest, says: "it is empty; answer y"},
		{name: "an answer nobody asked for", path: "/restart/1111/answer", body: `{"Answer":"yes"}`, status: http.StatusConflict,
			says: "restart 11111111 is not waiting for an answer (status: running)"},
		{name: "an ended restart", path: "/restart/3333/pause", status: http.StatusConflict,
			says: "restart 33333333 has already ended (succeeded); there is nothing to pause"},
		{name: "an unknown restart", path: "/restart/9999/pause", status: http.StatusNotFound, says: `no restart with ID or prefix \"9999\"`},
		{name: "a denial", path: "/restart/1111/resume", err: denied, status: http.StatusForbidden,
			says: `Permission denied: your token may not resume restart 11111111. Nomad refused \"write\"`, asked: "resume prod 11111111-aaaa page of agent-1"},
		{name: "no actions", path: "/restart/1111/pause", noActions: true, status: http.StatusNotImplemented,
			says: "this agent does not steer restarts from its page; use `nomad-restart pause <id>`"},
		{name: "a fleet's pause", path: "/fleet/4444/pause", status: http.StatusOK,
			says:  `{"message":"Pause requested: no new job starts, and the running restarts hold after their batch."}` + "\n",
			asked: "pause default 44444444-dddd page of agent-1"},
		{name: "a fleet's answer passed on to its restarts", path: "/fleet/4444/answer", body: `{"Answer":"yes"}`, answered: []string{"aaaaaaaa-1", "bbbbbbbb-2"},
			status: http.StatusOK, says: `{"message":"Answer given to restarts aaaaaaaa, bbbbbbbb."}` + "\n", asked: "answer yes default 44444444-dddd page of agent-1"},
		{name: "a fleet's answer no one waits for", path: "/fleet/4444/answer", err: fmt.Errorf("%w: neither fleet 44444444 nor any of its running jobs waits for one", steer.ErrNoQuestion),
			status: http.StatusConflict, says: "not waiting for an answer: neither fleet 44444444", asked: "answer  default 44444444-dddd page of agent-1"},
		{name: "fleets not steered", path: "/fleet/4444/cancel", noFleetSteering: true, status: http.StatusNotImplemented,
			says: "this agent does not steer fleets from its page; use `nomad-restart cancel <fleet-id>`"},
		{name: "no fleets followed", path: "/fleet/4444/cancel", noFleets: true, status: http.StatusNotFound,
			says: "this agent follows no fleets: they need the Nomad store (-state nomad)"},
		{name: "an unknown fleet", path: "/fleet/9999/resume", status: http.StatusNotFound, says: `no fleet with ID or prefix \"9999\"`},
		{name: "an unknown action", path: "/fleet/4444/delete", status: http.StatusNotFound, says: "the page offers pause, resume, cancel and answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakeSource{restarts: []*restart.Record{running, asking, ended}, fleets: []*fleet.Record{fl}, noFleets: tt.noFleets}
			restarts := &fakeSteerer{kind: steer.KindRestart, err: tt.err}
			fleets := &fakeSteerer{kind: steer.KindFleet, err: tt.err, answered: tt.answered}
			var tokens []string
			cfg := Config{Actions: func(token string) (Actions, error) {
				tokens = append(tokens, token)
				acts := Actions{Steer: steer.Steerers{Restarts: restarts, Fleets: fleets}}
				if tt.noFleetSteering {
					acts.Steer.Fleets = nil
				}
				return acts, nil
			}}
			if tt.noActions {
				cfg.Actions = nil
			}
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			req.Header.Set(TokenHeader, "secret")
			w := src.serve(cfg, req)
			if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.says) {
				t.Errorf("%d %s, want %d with %s", w.Code, w.Body, tt.status, tt.says)
			}
			asked := strings.Join(append(restarts.asked, fleets.asked...), "; ")
			if asked != tt.asked {
				t.Errorf("the steerers were asked %q, want %q", asked, tt.asked)
			}
			if asked != "" && (len(tokens) != 1 || tokens[0] != "secret") {
				t.Errorf("the actions were built with the tokens %q, want the request's", tokens)
			}
			if changed := w.Code == http.StatusOK; (src.changed == 1) != changed {
				t.Errorf("the source heard %d changes", src.changed)
			}
		})
	}
}

// The pages of a record answer its lookup's failure as plain text, with the status an
// action gets: 404, whether the record or every fleet is unknown.
func TestPagesOfUnknownRecords(t *testing.T) {
	tests := []struct {
		path     string
		noFleets bool
		says     string
	}{
		{"/restart/9999", false, `no restart with ID or prefix "9999"`},
		{"/fleet/9999/events", false, `no fleet with ID or prefix "9999"`},
		{"/fleet/4444", true, "this agent follows no fleets"},
	}
	for _, tt := range tests {
		w := (&fakeSource{noFleets: tt.noFleets}).serve(Config{}, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), tt.says) || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
			t.Errorf("GET %s: %d %s (%s), want 404 saying %q", tt.path, w.Code, w.Body, w.Header().Get("Content-Type"), tt.says)
		}
	}
	list := (&fakeSource{noFleets: true}).serve(Config{}, httptest.NewRequest(http.MethodGet, "/", nil))
	if list.Code != http.StatusOK || strings.Contains(list.Body.String(), "fleets could not be listed") || list.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("the list without fleets: %d, headers %v:\n%s", list.Code, list.Header(), list.Body)
	}
}
