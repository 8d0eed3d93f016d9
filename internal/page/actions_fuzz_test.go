package page

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// fakeFiler plans a restart of two allocations of the requested job and records what it
// was asked.
type fakeFiler struct {
	planned []engine.Request
	created int
}

func (f *fakeFiler) Plan(_ context.Context, req engine.Request) (*engine.Plan, error) {
	f.planned = append(f.planned, req)
	rec := &restart.Record{ID: "55555555-eeee", Namespace: req.Namespace, JobID: req.Job, Spec: req.Spec, Status: restart.StatusPending,
		Allocs: []restart.AllocProgress{{ID: "a1", Name: req.Job + ".g[0]", Batch: 1}, {ID: "a2", Name: req.Job + ".g[1]", Batch: 2}}, Batches: 2}
	return &engine.Plan{Record: rec}, nil
}

func (f *fakeFiler) Create(context.Context, *restart.Record) error { f.created++; return nil }

// pageRoutes are the page's POST routes a fuzzed request goes to: an action on a restart
// or a fleet, a plan, a filing.
var pageRoutes = []string{"/restart/%s/%s", "/fleet/%s/%s", "/restarts/plan", "/restarts"}

// FuzzPageRequests sends any JSON body to the page's actions and its new-restart form,
// through the real handler with the page tests' fake source, steerers and a fake planner:
// no panic or hang; every answer is JSON, with an error unless it succeeded; a refused
// request steers and files nothing; only a form that `run` would accept is planned, and
// only an answer the question takes reaches the steerer.
func FuzzPageRequests(f *testing.F) {
	for _, c := range []struct {
		route    uint8
		id, verb string
		body     string
	}{
		{0, "1111", "pause", ""}, {0, "2222", "answer", `{"Answer":"yes"}`}, {0, "2222", "answer", `{"Answer":"maybe"}`},
		{0, "2222", "answer", `{"Answer":"10s"}`}, {0, "1111", "answer", `{"Answer":"yes"}`}, {0, "3333", "pause", ""},
		{0, "9999", "pause", ""}, {1, "4444", "answer", `{"Answer":"yes"}`}, {1, "4444", "delete", ""}, {0, "2222", "answer", `{"Answer":`},
		{0, "2222", "answer", `{"answer":"y"} trailing`}, {0, "", "pause", "[]"},
		{2, "", "", `{"Job":" "}`}, {2, "", "", `{"Job":"web","BatchSize":"0"}`}, {2, "", "", `{"Job":"web","Health":"soon"}`},
		{2, "", "", `{"Job":"web","BatchSize":"50%","Health":"none"}`}, {3, "", "", `{"Job":"web","Expect":["a1","a2"]}`},
		{3, "", "", `{"Job":"web","Expect":["not-an-alloc"]}`}, {2, "", "", `{"Job":"web","Gates":"errors: up < 1\n\nlat: x > 2"}`},
		{2, "", "", `{"Job":"web","Gates":"errors: up"}`}, {2, "", "", `{"Job":"web","BatchSize":"1,,2"}`}, {3, "", "", `null`},
		{2, "", "", `{"Job":"web","Namespace":"\u0000"}`},
	} {
		f.Add(c.route, c.id, c.verb, c.body)
	}
	q := &restart.Question{ID: "q1", Kind: restart.QuestionProceed, Text: "Proceed?", Options: "Y/n/<wait duration>", Default: "y"}
	f.Fuzz(func(t *testing.T, route uint8, id, verb, body string) {
		src := &fakeSource{
			restarts: []*restart.Record{
				{ID: "11111111-aaaa", Namespace: "prod", JobID: "web", Status: restart.StatusRunning},
				{ID: "22222222-bbbb", Namespace: "prod", JobID: "api", Status: restart.StatusWaiting, Question: q},
				{ID: "33333333-cccc", Namespace: "prod", JobID: "db", Status: restart.StatusSucceeded},
			},
			fleets: []*fleet.Record{{Fleet: fleet.Fleet{ID: "44444444-dddd", Status: restart.StatusRunning}, Namespace: "default"}},
		}
		restarts := &fakeSteerer{kind: steer.KindRestart}
		fleets := &fakeSteerer{kind: steer.KindFleet}
		filer := &fakeFiler{}
		cfg := Config{Actions: func(string) (Actions, error) {
			return Actions{Steer: steer.Steerers{Restarts: restarts, Fleets: fleets}, File: filer}, nil
		}}
		path := pageRoutes[int(route)%len(pageRoutes)]
		if strings.Contains(path, "%s") {
			path = strings.Replace(strings.Replace(path, "%s", url.PathEscape(id), 1), "%s", url.PathEscape(verb), 1)
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		fuzztest.Bound(t, "the page's handler", func() {
			w := src.serve(cfg, req)
			checkPageAnswer(t, path, body, w, restarts, fleets, filer)
		})
	})
}

func checkPageAnswer(t *testing.T, path, body string, w *httptest.ResponseRecorder, restarts, fleets *fakeSteerer, filer *fakeFiler) {
	asked := append(append([]string(nil), restarts.asked...), fleets.asked...)
	what := "POST " + path + " " + body
	if w.Header().Get("Content-Type") != "application/json" {
		// Only the mux answers otherwise: a path that names no action (a redirect, a 404).
		if len(asked) > 0 || len(filer.planned) > 0 {
			t.Errorf("%s: %d %q, after acting", what, w.Code, w.Body)
		}
		return
	}
	var res actionResult
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		t.Errorf("%s: the answer %q is not JSON: %v", what, w.Body, err)
		return
	}
	if w.Code != http.StatusOK {
		if res.Error == "" {
			t.Errorf("%s: %d without an error: %s", what, w.Code, w.Body)
		}
		if len(asked) > 0 || filer.created > 0 {
			t.Errorf("%s: refused (%d %s) after steering %q or filing %d", what, w.Code, res.Error, asked, filer.created)
		}
		if w.Code == http.StatusBadRequest && len(filer.planned) == 0 && strings.HasPrefix(path, "/restarts") {
			checkFormRefusal(t, what, body, res.Error)
		}
	}
	for _, a := range restarts.asked {
		if answer, ok := strings.CutPrefix(a, "answer "); ok {
			// "answer <text> prod 22222222-bbbb page of agent-1": the question is the record's.
			text := strings.TrimSuffix(answer, " prod 22222222-bbbb page of agent-1")
			q := &restart.Question{Options: "Y/n/<wait duration>", Default: "y"}
			if _, err := restart.ParseAnswer(q, text); err != nil {
				t.Errorf("%s: the answer %q reached the steerer: %v", what, text, err)
			}
		}
	}
	for _, req := range filer.planned {
		checkFiledRequest(t, what, req)
	}
}

// checkFormRefusal checks that a refused form names what is wrong with it.
func checkFormRefusal(t *testing.T, what, body, msg string) {
	var form fileRequest
	if json.Unmarshal([]byte(body), &form) != nil {
		if !strings.Contains(msg, "not JSON") && !strings.Contains(msg, "unknown field") {
			t.Errorf("%s: a body that is not JSON refused with %q", what, msg)
		}
		return
	}
	for _, words := range []string{"invalid -", "Invalid -", "The -", "gate", "give the job", "not JSON", "unknown field"} {
		if strings.Contains(msg, words) {
			return
		}
	}
	t.Errorf("%s: the refusal %q names no field of the form", what, msg)
}

// checkFiledRequest checks a request the form planned: one `run` would take.
func checkFiledRequest(t *testing.T, what string, req engine.Request) {
	if req.Job == "" || req.Job != strings.TrimSpace(req.Job) || req.Namespace == "" {
		t.Errorf("%s: planned job %q in namespace %q", what, req.Job, req.Namespace)
	}
	for _, b := range req.Spec.BatchSizes {
		if b.N <= 0 {
			t.Errorf("%s: planned the batch size %+v", what, b)
		}
	}
	switch req.Spec.Health {
	case "", restart.HealthAuto, restart.HealthChecks, restart.HealthNone, restart.HealthRunning:
	default:
		t.Errorf("%s: planned -health %q", what, req.Spec.Health)
	}
	if g := req.Spec.Gates; g != nil {
		if _, err := gate.ParseAll(g.Specs); err != nil || len(g.Specs) == 0 {
			t.Errorf("%s: planned the gates %q: %v", what, g.Specs, err)
		}
	}
}

// FuzzPageRecord shows any stored restart record (anyone who may write nomad-restart's
// variables can write one; the store decodes whatever JSON it holds) on the page: the list
// and the restart's own page render or answer an error, never panic or hang.
func FuzzPageRecord(f *testing.F) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, rec := range []*restart.Record{
		timelineRecord(t0), budgetRecord(t0),
		{ID: "11111111-aaaa", JobID: "web", Status: restart.StatusRunning, Batches: 2, CurrentBatch: 9,
			Allocs: []restart.AllocProgress{{ID: "a", Batch: 0}, {ID: "b", Batch: -3}, {ID: "c", Batch: 7}}},
		{ID: "11111111-aaaa", Status: "weird", StartTime: t0.Add(time.Hour), EndTime: t0, Batches: -1},
	} {
		b, err := json.Marshal(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var rec restart.Record
		if json.Unmarshal(b, &rec) != nil {
			return
		}
		rec.ID = "11111111-aaaa" // the page finds it by this prefix
		src := &fakeSource{restarts: []*restart.Record{&rec}}
		fuzztest.Bound(t, "the page of a stored record", func() {
			for _, path := range []string{"/", "/restart/1111"} {
				w := src.serve(Config{}, httptest.NewRequest(http.MethodGet, path, nil))
				if w.Code != http.StatusOK && w.Code != http.StatusInternalServerError {
					t.Errorf("GET %s of the record %s: %d", path, b, w.Code)
				}
			}
		})
	})
}
