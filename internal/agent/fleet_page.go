package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// FleetSteerer performs the operator's actions on a fleet, as Steerer does on a restart:
// the page gets one per request from Config.SteerFleet, built on the Nomad token the
// browser sent. *fleetrun.Driver satisfies it.
type FleetSteerer interface {
	Pause(ctx context.Context, namespace, id, by string) (*fleet.Record, error)
	Resume(ctx context.Context, namespace, id, by string) (*fleet.Record, error)
	// Cancel records the cancel and, when no driver holds the fleet, winds it down itself
	// (as `nomad-restart cancel <fleet>` does).
	Cancel(ctx context.Context, namespace, id, by string) (*fleet.Record, error)
	// Answer answers the fleet's question, or else each of its children waiting for one,
	// and returns the restarts it answered.
	Answer(ctx context.Context, namespace, id, answer, by string) ([]string, error)
}

var _ FleetSteerer = (*fleetrun.Driver)(nil)

// fleetRoutes adds the fleets' pages and actions to the agent's handler:
//
//	GET  /fleet/<id>             one fleet (ID or unique prefix): its jobs, their restarts, its events
//	GET  /fleet/<id>/events      server-sent events: that fleet's live part
//	POST /fleet/<id>/<action>    pause, resume, cancel or answer, with the X-Nomad-Token of the request
func (a *Agent) fleetRoutes(mux *http.ServeMux, sameOrigin *http.CrossOriginProtection) {
	mux.HandleFunc("GET /fleet/{id}", a.serveFleet)
	mux.HandleFunc("GET /fleet/{id}/events", a.serveFleetEvents)
	mux.Handle("POST /fleet/{id}/{action}", sameOrigin.Handler(http.HandlerFunc(a.serveFleetAction)))
}

// fleetRow is one fleet as the list shows it.
type fleetRow struct {
	Rec *fleet.Record
	// Done counts the jobs that succeeded or were skipped for a recorded reason; Ended
	// every job that reached an end (the bar); Failed the failed ones.
	Done, Ended, Failed, Total int
	Percent                    int
	// Running are the jobs whose restart runs now (paused and waiting ones included).
	Running []fleet.Job
}

func newFleetRow(rec *fleet.Record) fleetRow {
	row := fleetRow{Rec: rec, Total: len(rec.Jobs), Percent: 100}
	for _, j := range rec.Jobs {
		switch {
		case j.Status == fleet.JobRunning && j.RestartID != "":
			row.Running = append(row.Running, j)
		case j.Status == fleet.JobSucceeded || j.Status == fleet.JobSkipped:
			row.Done++
		case j.Status == fleet.JobFailed:
			row.Failed++
		}
		if j.Status.Terminal() {
			row.Ended++
		}
	}
	if row.Total > 0 {
		row.Percent = row.Ended * 100 / row.Total
	}
	return row
}

// fleetRows are the fleets of the latest listing, for the list page (nil when fleets are
// off), and why that listing failed.
func (a *Agent) fleetRows() ([]fleetRow, string) {
	if a.fleets == nil {
		return nil, ""
	}
	recs, err := a.fleets.snapshot()
	rows := make([]fleetRow, 0, len(recs))
	for _, rec := range recs {
		rows = append(rows, newFleetRow(rec))
	}
	if err != nil {
		return rows, err.Error()
	}
	return rows, ""
}

// fleetListTemplate is the list page's fleets table, shown above the restarts when there
// are fleets (page_templates.go includes it in listLive).
const fleetListTemplate = `{{define "fleetList"}}
{{with .FleetsError}}<p class="err" role="alert">The fleets could not be listed: {{.}}</p>{{end}}
{{if .Fleets}}<h2 id="fleets-h">Fleets</h2>
<table id="fleets" aria-labelledby="fleets-h"><caption style="text-align:left;color:#5c6370">Many jobs restarted under one ID, newest first</caption>
<thead><tr><th scope="col">ID</th><th scope="col">Namespace</th><th scope="col">Jobs selected by</th><th scope="col">Status</th><th scope="col">Jobs</th><th scope="col">Restarting now</th><th scope="col">Driver</th><th scope="col">Submitted</th></tr></thead><tbody>
{{range .Fleets}}<tr class="fleet {{.Rec.Status}}" data-id="{{.Rec.ID}}" data-status="{{.Rec.Status}}" data-done="{{.Done}}" data-total="{{.Total}}">
<td><a href="/fleet/{{.Rec.ID}}" title="{{.Rec.ID}}"><code>{{short .Rec.ID}}</code></a></td>
<td>{{.Rec.Namespace}}</td><td><code>{{.Rec.Selection.Filter}}</code></td>
<td><span class="st s-{{.Rec.Status}}">{{.Rec.Status}}</span></td>
<td><span class="bar" role="progressbar" aria-label="Jobs ended in fleet {{short .Rec.ID}}" aria-valuemin="0" aria-valuemax="100" aria-valuenow="{{.Percent}}"><span style="width:{{.Percent}}%"></span></span> {{.Done}}/{{.Total}} done{{if .Failed}}, {{.Failed}} failed{{end}}</td>
<td>{{range .Running}}<a class="child" href="/restart/{{.RestartID}}" title="restart {{.RestartID}} of job {{.JobID}} (namespace {{.Namespace}})">{{.JobID}}</a> {{end}}</td>
<td>{{.Rec.Driver}}</td><td>{{when .Rec.CreateTime}}</td></tr>
{{end}}</tbody></table>
<h2>Restarts</h2>{{end}}
{{end}}`

var fleetPage = template.Must(template.Must(pageFrame.Clone()).Parse(`{{template "top" .}}
<p><a href="/">&larr; Restarts and fleets</a></p>
<h1>Fleet <code title="{{.Live.Rec.ID}}">{{short .Live.Rec.ID}}</code></h1>
<section id="actions" aria-labelledby="actions-h" data-base="/fleet/{{.Live.Rec.ID}}">
<h2 id="actions-h">Actions</h2>
<p style="margin:.2em 0 .6em;font-size:.9em">Each action runs with your ACL token (set it under <em>ACL Token</em> above), as <code>nomad-restart pause|resume|cancel|answer {{short .Live.Rec.ID}}</code> would with it. Pause starts no new job and pauses the running restarts after their batch; cancel starts no new job and cancels the running restarts.</p>
<div role="group" aria-label="Steer this fleet">
<button type="button" id="act-pause" data-action="pause">Pause</button>
<button type="button" id="act-resume" data-action="resume">Resume</button>
<button type="button" id="act-cancel" data-action="cancel" class="danger">Cancel fleet</button>
</div>
<form id="answer-form" hidden><label for="answer">Answer: <span id="question-text"></span></label>
<input id="answer" name="answer" autocomplete="off" placeholder="yes or no">
<button type="submit">Answer</button></form>
<p id="action-msg" role="status" aria-live="polite"></p>
</section>
<div id="live">{{template "fleetLive" .Live}}</div>
{{template "bottom" .}}
{{define "fleetLive"}}
<table id="summary">
<tr><th scope="row">Jobs</th><td><code>-jobs {{printf "%q" .Rec.Selection.Filter}}</code> in namespace {{.Rec.Selection.Namespace}}: {{.Total}} jobs, at most {{.Rec.Options.MaxParallelJobs}} at once, {{.Rec.Options.MaxFailedJobs}} may fail (then {{.Rec.Options.OnError}}), order {{.Rec.Options.Order}}, busy jobs: {{.Rec.Options.Busy}}</td></tr>
<tr><th scope="row">Status</th><td><span class="st s-{{.Rec.Status}}" id="status">{{.Rec.Status}}</span> {{.Rec.Reason}}{{if and .Rec.Control.Intent (ne (print .Rec.Control.Intent) "run") (not .Rec.Status.Terminal)}} (intent: {{.Rec.Control.Intent}}{{with .Rec.Control.By}} by {{.}}{{end}}){{end}}</td></tr>
<tr><th scope="row">Progress</th><td><span class="bar" role="progressbar" aria-label="Jobs ended" aria-valuemin="0" aria-valuemax="100" aria-valuenow="{{.Percent}}"><span style="width:{{.Percent}}%"></span></span> {{.Done}}/{{.Total}} done{{if .Failed}}, {{.Failed}} failed{{end}}, {{len .Running}} restarting</td></tr>
<tr><th scope="row">Driver</th><td>{{.Rec.Driver}}</td></tr>
<tr><th scope="row">Submitted</th><td>{{when .Rec.CreateTime}}</td></tr>
{{if .Rec.Question}}<tr><th scope="row">Question</th><td id="question">{{.Rec.Question.Text}} [{{.Rec.Question.Options}}]</td></tr>{{end}}
</table>
<h2>Jobs</h2>
<table id="jobs"><thead><tr><th scope="col">Namespace</th><th scope="col">Job</th><th scope="col">Status</th><th scope="col">Restart</th><th scope="col">Detail</th></tr></thead><tbody>
{{range .Rec.Jobs}}<tr class="job" data-job="{{.JobID}}" data-status="{{.Status}}"><td>{{.Namespace}}</td><td>{{.JobID}}</td><td><span class="st s-{{.Status}}">{{.Status}}</span></td>
<td>{{with .RestartID}}<a class="child" href="/restart/{{.}}" title="{{.}}"><code>{{short .}}</code></a>{{end}}</td><td>{{.Reason}}</td></tr>
{{end}}</tbody></table>
<h2>Events</h2>
<table id="events"><tbody>
{{range .Rec.Events}}<tr><td>{{when .Time}}</td><td>{{.Type}}</td><td>{{.Message}}</td></tr>
{{end}}</tbody></table>
{{end}}`))

func (a *Agent) serveFleet(w http.ResponseWriter, r *http.Request) {
	rec, ok := a.findFleetForPage(w, r)
	if !ok {
		return
	}
	render(w, fleetPage, frame{
		Title:  fmt.Sprintf("Fleet %s - nomad-restart", short(rec.ID)),
		Holder: a.cfg.Holder, Stream: "/fleet/" + rec.ID + "/events",
		Status: string(rec.Status), Question: fleetQuestion(rec), Live: newFleetRow(rec),
	})
}

// serveFleetEvents streams one fleet's live part, from the listing the fleet runner keeps
// current (each change of the fleets wakes the page's streams).
func (a *Agent) serveFleetEvents(w http.ResponseWriter, r *http.Request) {
	rec, ok := a.findFleetForPage(w, r)
	if !ok {
		return
	}
	ns, id := rec.Namespace, rec.ID
	a.serveStream(w, r, func(ctx context.Context) (liveUpdate, error) {
		cur, err := a.cachedFleet(ctx, ns, id)
		if err != nil {
			return liveUpdate{}, err
		}
		html, err := renderString(fleetPage, "fleetLive", newFleetRow(cur))
		return liveUpdate{HTML: html, Status: string(cur.Status), Question: fleetQuestion(cur)}, err
	})
}

// cachedFleet returns the fleet from the runner's latest listing, or reads it when the
// listing does not have it yet (a fleet just filed).
func (a *Agent) cachedFleet(ctx context.Context, ns, id string) (*fleet.Record, error) {
	recs, _ := a.fleets.snapshot()
	for _, rec := range recs {
		if rec.Namespace == ns && rec.ID == id {
			return rec, nil
		}
	}
	return a.fleets.fleets.Get(ctx, ns, id)
}

// findFleetForPage resolves the fleet a page names, answering the error itself when it fails.
func (a *Agent) findFleetForPage(w http.ResponseWriter, r *http.Request) (*fleet.Record, bool) {
	if a.fleets == nil {
		http.Error(w, "this agent follows no fleets: they need the Nomad store (-state nomad)", http.StatusNotFound)
		return nil, false
	}
	rec, err := a.fleets.fleets.Find(r.Context(), a.cfg.Namespace, r.PathValue("id"))
	var amb *store.AmbiguousIDError
	switch {
	case errors.Is(err, store.ErrFleetNotFound):
		http.Error(w, fmt.Sprintf("no fleet with ID or prefix %q", r.PathValue("id")), http.StatusNotFound)
	case errors.As(err, &amb):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		http.Error(w, "reading the fleet: "+err.Error(), http.StatusBadGateway)
	default:
		return rec, true
	}
	return nil, false
}

func fleetQuestion(rec *fleet.Record) string {
	if rec.Question == nil || rec.Status != restart.StatusWaiting {
		return ""
	}
	return rec.Question.Text + " [" + rec.Question.Options + "]"
}

// fleetAction is one thing the page may ask of a fleet; do returns what the page says once
// it is stored.
type fleetAction struct {
	verb string
	do   func(ctx context.Context, s FleetSteerer, rec *fleet.Record, answer, by string) (string, error)
}

func fleetActionFor(name string) (fleetAction, bool) {
	intent := func(verb, done string, call func(FleetSteerer, context.Context, string, string, string) (*fleet.Record, error)) fleetAction {
		return fleetAction{verb, func(ctx context.Context, s FleetSteerer, rec *fleet.Record, _, by string) (string, error) {
			_, err := call(s, ctx, rec.Namespace, rec.ID, by)
			return done, err
		}}
	}
	switch name {
	case "pause":
		return intent("pause", "Pause requested: no new job starts, and the running restarts hold after their batch.", FleetSteerer.Pause), true
	case "resume":
		return intent("resume", "Resume requested: the fleet's driver starts jobs again (or an agent adopts it).", FleetSteerer.Resume), true
	case "cancel":
		return intent("cancel", "Cancel requested: no new job starts, and the running restarts are canceled.", FleetSteerer.Cancel), true
	case "answer":
		return fleetAction{"answer", func(ctx context.Context, s FleetSteerer, rec *fleet.Record, answer, by string) (string, error) {
			answered, err := s.Answer(ctx, rec.Namespace, rec.ID, answer, by)
			if err != nil || len(answered) == 0 {
				return "Answer recorded.", err
			}
			shorts := make([]string, len(answered))
			for i, id := range answered {
				shorts[i] = short(id)
			}
			return "Answer given to restarts " + strings.Join(shorts, ", ") + ".", nil
		}}, true
	}
	return fleetAction{}, false
}

// serveFleetAction performs one action on a fleet with the token of the request, as
// serveAction does for a restart (POST only, through http.CrossOriginProtection).
func (a *Agent) serveFleetAction(w http.ResponseWriter, r *http.Request) {
	act, ok := fleetActionFor(r.PathValue("action"))
	switch {
	case !ok:
		writeResult(w, http.StatusNotFound, actionResult{Error: fmt.Sprintf("unknown action %q: the page offers pause, resume, cancel and answer", r.PathValue("action"))})
		return
	case a.fleets == nil:
		writeResult(w, http.StatusNotFound, actionResult{Error: "this agent follows no fleets: they need the Nomad store (-state nomad)"})
		return
	case a.cfg.SteerFleet == nil:
		writeResult(w, http.StatusNotImplemented, actionResult{Error: "this agent does not steer fleets from its page; use `nomad-restart " + act.verb + " <fleet-id>`"})
		return
	}
	var body struct{ Answer string }
	if err := json.NewDecoder(io.LimitReader(r.Body, maxActionBody)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeResult(w, http.StatusBadRequest, actionResult{Error: "the request body is not JSON like {\"Answer\": \"yes\"}: " + err.Error()})
		return
	}
	rec, status, msg := a.fleetActionTarget(r.Context(), r.PathValue("id"), act)
	if msg != "" {
		writeResult(w, status, actionResult{Error: msg})
		return
	}
	st, err := a.cfg.SteerFleet(r.Header.Get(TokenHeader))
	if err != nil {
		writeResult(w, http.StatusBadGateway, actionResult{Error: "connecting to Nomad with your token: " + err.Error()})
		return
	}
	done, err := act.do(r.Context(), st, rec, body.Answer, "page of "+a.cfg.Holder)
	if err != nil {
		status, text := fleetSteerFailure(act.verb+" fleet "+short(rec.ID), rec.Namespace, err)
		a.log.Info("action on a fleet from the page refused", "fleet", rec.ID, "namespace", rec.Namespace, "action", act.verb, "status", status)
		writeResult(w, status, actionResult{Error: text})
		return
	}
	a.log.Info("action on a fleet from the page", "fleet", rec.ID, "namespace", rec.Namespace, "action", act.verb)
	writeResult(w, http.StatusOK, actionResult{Message: done})
}

// fleetActionTarget finds the fleet and checks that it has not ended; it returns an HTTP
// status and a message when the action cannot apply.
func (a *Agent) fleetActionTarget(ctx context.Context, id string, act fleetAction) (*fleet.Record, int, string) {
	rec, err := a.fleets.fleets.Find(ctx, a.cfg.Namespace, id)
	var amb *store.AmbiguousIDError
	switch {
	case errors.Is(err, store.ErrFleetNotFound):
		return nil, http.StatusNotFound, fmt.Sprintf("no fleet with ID or prefix %q", id)
	case errors.As(err, &amb):
		return nil, http.StatusBadRequest, err.Error()
	case err != nil:
		return nil, http.StatusBadGateway, "reading the fleet: " + err.Error()
	case rec.Status.Terminal():
		return nil, http.StatusConflict, fmt.Sprintf("fleet %s has already ended (%s); there is nothing to %s", short(rec.ID), rec.Status, act.verb)
	}
	return rec, 0, ""
}

// fleetSteerFailure words a refused action on a fleet for the page, as steerFailure does
// for a restart.
func fleetSteerFailure(what, namespace string, err error) (int, string) {
	var ended *steer.EndedError
	switch {
	case errors.As(err, &ended), errors.Is(err, steer.ErrNoQuestion), errors.Is(err, restart.ErrInvalidAnswer):
		return http.StatusConflict, err.Error()
	case errors.Is(err, store.ErrFleetNotFound):
		// The agent's token found it: the user's may not read it, or it was deleted meanwhile.
		return http.StatusForbidden, fmt.Sprintf("Permission denied: your token cannot %s: it cannot read the fleet (set your ACL token under ACL Token, at the top of the page); the token's ACL policy needs %s (the operator policy of deploy/operator-policy.hcl has it).",
			what, variablesRule(namespace, ""))
	}
	return steerFailure(what, namespace, err)
}
