package page

import (
	"context"
	"errors"
	"fmt"
	"html/template"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// What the page shows of fleets beside restarts: a table above the list, a page per fleet
// with its jobs and links to their restarts. A fleet is steered as a restart is
// (actions.go); what differs is its children.

// fleetKind is how the page finds, steers and words fleets.
var fleetKind = &kind{
	name:     steer.KindFleet,
	notFound: store.ErrFleetNotFound,
	find:     findHead(Source.Fleet, steer.FleetHead),
	idArg:    "<fleet-id>",
	done: map[string]string{
		"pause":  "Pause requested: no new job starts, and the running restarts hold after their batch.",
		"resume": "Resume requested: the fleet's driver starts jobs again (or an agent adopts it).",
		"cancel": "Cancel requested: no new job starts, and the running restarts are canceled.",
		"answer": "Answer recorded.",
	},
	passesAnswers: true,
	note:          "Pause starts no new job and pauses the running restarts after their batch; cancel starts no new job and cancels the running restarts.",
	answerHint:    "yes or no",
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
	// Lanes are its waves, one lane each, when it orders its jobs by their upstreams.
	Lanes []waveLane
}

// waveLane is one wave of a fleet as the page draws it: a lane of its jobs, with its state
// and what its held jobs wait for.
type waveLane struct {
	fleet.WaveSummary
	Jobs []fleet.Job
}

// lanesOf draws the fleet's waves (none for a fleet without).
func lanesOf(rec *fleet.Record) []waveLane {
	var out []waveLane
	for _, w := range rec.WaveSummaries() {
		lane := waveLane{WaveSummary: w}
		for _, i := range rec.WaveOf(w.Wave) {
			lane.Jobs = append(lane.Jobs, rec.Jobs[i])
		}
		out = append(out, lane)
	}
	return out
}

func newFleetRow(rec *fleet.Record) fleetRow {
	row := fleetRow{Rec: rec, Total: len(rec.Jobs), Percent: 100, Lanes: lanesOf(rec)}
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

// fleetRows are the fleets of the latest listing, for the list page (none when the Source
// follows no fleets), and why that listing failed.
func (s *server) fleetRows() ([]fleetRow, string) {
	recs, err := s.src.Fleets()
	if errors.Is(err, ErrNoFleets) {
		return nil, ""
	}
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
// are fleets (templates.go includes it in listLive).
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
{{template "actions" .Actions}}
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
{{if .Lanes}}<h2 id="waves-h">Waves</h2>
<div id="waves" aria-labelledby="waves-h" style="display:flex;flex-direction:column;gap:.4em">
{{range .Lanes}}<div class="lane" data-wave="{{.Wave}}" data-state="{{.State}}" style="border-left:4px solid #9aa3ad;padding:.3em .6em">
<strong>Wave {{.Wave}}</strong> <span class="st">{{.State}}</span>:
{{range .Jobs}}<span class="st s-{{.Status}} lane-job" data-job="{{.JobID}}" title="{{.Namespace}}/{{.JobID}}: {{.Status}}">{{.JobID}}</span> {{end}}
{{range .Waits}}<div class="waits">{{.}}</div>{{end}}
</div>
{{end}}{{range .Rec.Outside}}<div class="lane outside" data-job="{{.JobID}}">Outside the fleet, must be healthy: {{.Namespace}}/{{.JobID}}: {{if .Evidence.Ready}}healthy{{else if .Evidence.Unready}}{{.Evidence.Unready}}{{else}}{{or .Evidence.Waits "not measured yet"}}{{end}}</div>
{{end}}</div>{{end}}
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

// fleetView is how the page serves a fleet's page and its live stream.
func (s *server) fleetView() recordView[*fleet.Record] {
	return recordView[*fleet.Record]{
		s: s, kind: fleetKind, page: fleetPage, live: "fleetLive",
		find: s.src.Fleet, listed: s.listedFleet, head: steer.FleetHead,
		title: func(rec *fleet.Record) string { return fmt.Sprintf("Fleet %s", short(rec.ID)) },
		data:  func(rec *fleet.Record) any { return newFleetRow(rec) },
	}
}

// listedFleet returns the fleet from the Source's latest listing, or reads it when the
// listing does not have it yet (a fleet just filed).
func (s *server) listedFleet(ctx context.Context, ns, id string) (*fleet.Record, error) {
	recs, _ := s.src.Fleets()
	for _, rec := range recs {
		if rec.Namespace == ns && rec.ID == id {
			return rec, nil
		}
	}
	return s.src.Fleet(ctx, id)
}
