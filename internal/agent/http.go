package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Handler serves the agent's read-only HTTP interface:
//
//	GET /                 the restarts, newest first, each with a progress bar
//	GET /restart/<id>     one restart (ID or unique prefix): its allocations and events
//	GET /healthz          200 while the agent runs (503 before its first listing, and while stopping)
//	GET /metrics          Prometheus metrics
//
// Nothing it serves changes a restart: steering goes through the CLI and Nomad's ACLs.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", a.serveList)
	mux.HandleFunc("GET /restart/{id}", a.serveRestart)
	mux.HandleFunc("GET /healthz", a.serveHealth)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// Refresh the status gauges from the records (at most every ViewMaxAge).
		if _, err := a.view.records(r.Context()); err != nil {
			a.log.Debug("refreshing restarts for metrics", "err", err)
		}
		a.metrics.Handler().ServeHTTP(w, r)
	})
	return mux
}

func (a *Agent) serveHealth(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	body := map[string]any{"holder": a.cfg.Holder, "driving": a.drivingCount(), "listed": a.running, "stopping": a.stopped}
	ok := a.running && !a.stopped
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if ok {
		body["status"] = "ok"
	} else {
		body["status"] = "unavailable"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

type listRow struct {
	Rec      *restart.Record
	Progress restart.Progress
	Percent  int
}

func (a *Agent) serveList(w http.ResponseWriter, r *http.Request) {
	recs, err := a.view.records(r.Context())
	data := struct {
		Holder  string
		Rows    []listRow
		Error   string
		Refresh int
	}{Holder: a.cfg.Holder, Refresh: refreshSeconds}
	if err != nil {
		data.Error = err.Error()
	}
	now := a.cfg.Now()
	for _, rec := range recs {
		p := rec.Progress(now)
		data.Rows = append(data.Rows, listRow{Rec: rec, Progress: p, Percent: percent(p)})
	}
	render(w, listPage, data)
}

func (a *Agent) serveRestart(w http.ResponseWriter, r *http.Request) {
	rec, err := a.view.record(r.Context(), r.PathValue("id"))
	var amb *store.AmbiguousIDError
	switch {
	case errors.Is(err, store.ErrNotFound):
		http.Error(w, fmt.Sprintf("no restart with ID or prefix %q", r.PathValue("id")), http.StatusNotFound)
		return
	case errors.As(err, &amb):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, "reading the restart: "+err.Error(), http.StatusBadGateway)
		return
	}
	p := rec.Progress(a.cfg.Now())
	render(w, restartPage, struct {
		Rec      *restart.Record
		Progress restart.Progress
		Percent  int
		Refresh  int
	}{rec, p, percent(p), refreshSeconds})
}

// refreshSeconds is the pages' meta refresh: live enough to follow a batch, cheap for the
// agent since reads are cached for ViewMaxAge.
const refreshSeconds = 2

func percent(p restart.Progress) int {
	if p.Total == 0 {
		return 100
	}
	return (p.Done + p.Failed + p.Skipped) * 100 / p.Total
}

func render(w http.ResponseWriter, t *template.Template, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := t.Execute(w, data); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
	}
}

var funcs = template.FuncMap{
	"short": func(id string) string {
		if len(id) > 8 {
			return id[:8]
		}
		return id
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
}

const style = `<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #ddd;font-size:.92em}
.bar{width:14em;height:1em;background:#eee;border-radius:3px;overflow:hidden;display:inline-block;vertical-align:middle}
.bar>span{display:block;height:100%;background:#3a7}
.failed .bar>span,.s-failed{background:#c44;color:#fff}
.s-succeeded{background:#3a7;color:#fff}.s-running{background:#37c;color:#fff}
.s-paused,.s-waiting{background:#e90}.s-canceled{background:#888;color:#fff}.s-pending{background:#ccc}
.st{padding:0 .4em;border-radius:3px}
.err{color:#c44}
code{font-size:.95em}
</style>`

var listPage = template.Must(template.New("list").Funcs(funcs).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{{.Refresh}}">
<title>nomad-restart agent</title>` + style + `</head><body>
<h1>Restarts</h1>
<p>Agent <code>{{.Holder}}</code>. This page is read-only and refreshes every {{.Refresh}}s; steer restarts with <code>nomad-restart pause|resume|cancel|answer &lt;id&gt;</code>.</p>
{{if .Error}}<p class="err">Some restarts could not be read: {{.Error}}</p>{{end}}
{{if not .Rows}}<p id="empty">No restarts.</p>{{else}}
<table id="restarts"><thead><tr><th>ID</th><th>Namespace</th><th>Job</th><th>Status</th><th>Progress</th><th>Driver</th><th>Created</th></tr></thead><tbody>
{{range .Rows}}<tr class="restart {{.Rec.Status}}" data-id="{{.Rec.ID}}">
<td><a href="/restart/{{.Rec.ID}}"><code>{{short .Rec.ID}}</code></a></td>
<td>{{.Rec.Namespace}}</td><td>{{.Rec.JobID}}</td>
<td><span class="st s-{{.Rec.Status}}">{{.Rec.Status}}</span></td>
<td><span class="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="{{.Percent}}"><span style="width:{{.Percent}}%"></span></span> {{.Progress}}</td>
<td>{{.Rec.Driver}}</td><td>{{when .Rec.CreateTime}}</td></tr>
{{end}}</tbody></table>{{end}}
</body></html>`))

var restartPage = template.Must(template.New("restart").Funcs(funcs).Parse(`<!doctype html>
<html><head><meta charset="utf-8">{{if not .Rec.Status.Terminal}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<title>Restart {{short .Rec.ID}} of {{.Rec.JobID}}</title>` + style + `</head><body>
<p><a href="/">&larr; all restarts</a></p>
<h1>Restart <code>{{.Rec.ID}}</code></h1>
<table id="summary">
<tr><th>Job</th><td>{{.Rec.JobID}} (namespace {{.Rec.Namespace}}, version {{.Rec.JobVersion}})</td></tr>
<tr><th>Status</th><td><span class="st s-{{.Rec.Status}}" id="status">{{.Rec.Status}}</span> {{.Rec.Reason}}</td></tr>
<tr><th>Progress</th><td><span class="bar" role="progressbar" aria-valuenow="{{.Percent}}"><span style="width:{{.Percent}}%"></span></span> {{.Progress}}</td></tr>
<tr><th>Driver</th><td>{{.Rec.Driver}}</td></tr>
<tr><th>Created</th><td>{{when .Rec.CreateTime}}</td></tr>
{{if .Rec.Question}}<tr><th>Question</th><td>{{.Rec.Question.Text}} [{{.Rec.Question.Options}}] — answer with <code>nomad-restart answer {{short .Rec.ID}} …</code></td></tr>{{end}}
</table>
<h2>Allocations</h2>
<table id="allocs"><thead><tr><th>Batch</th><th>Allocation</th><th>Name</th><th>Group</th><th>Node</th><th>State</th><th>Detail</th></tr></thead><tbody>
{{range .Rec.Allocs}}<tr class="alloc" data-state="{{.State}}"><td>{{.Batch}}</td><td><code>{{short .ID}}</code></td><td>{{.Name}}</td><td>{{.Group}}</td><td><code>{{short .NodeID}}</code></td><td>{{.State}}</td>
<td>{{if .Replacement}}replaced by <code>{{short .Replacement}}</code> {{end}}{{if .Error}}<span class="err">{{.Error}}</span>{{else}}{{.Waiting}}{{end}}</td></tr>
{{end}}</tbody></table>
<h2>Events</h2>
<table id="events"><tbody>
{{range .Rec.Events}}<tr><td>{{when .Time}}</td><td>{{.Type}}</td><td>{{.Message}}</td></tr>
{{end}}</tbody></table>
</body></html>`))
