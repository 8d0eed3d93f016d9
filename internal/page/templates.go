package page

import (
	"html/template"
	"time"
)

// The page's templates. Each page is a frame (header, token form, the banner shown while
// live updates are down) around a live part (id "live") that the event stream replaces as
// records change; the same template renders the live part for the page and for the stream,
// so both always agree. A restart's page and a fleet's share the frame's actions section,
// worded by their kind (actions.go). Words and colours follow Nomad's web UI: statuses as
// labels, IDs shortened to 8 characters, times relative with the absolute time on hover.

var pageFuncs = template.FuncMap{
	"short": short,
	// when is a time the script shows relative ("3m ago"); the absolute time is its title.
	"when": func(t time.Time) template.HTML {
		if t.IsZero() {
			return ""
		}
		abs := stamp(t)
		return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339) + `" title="` + abs + `">` + abs + `</time>`)
	},
	"stamp": stamp,
	"add":   func(a, b int) int { return a + b },
}

const pageStyle = `
:root{--ink:#1f2124;--muted:#5c6370;--line:#dce0e6;--blue:#1563ff;--green:#15803d;--red:#c73445;--amber:#fa8f37;--grey:#6f7682}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:var(--ink);background:#fff}
header{background:#000;color:#fff;display:flex;align-items:center;gap:1.5em;padding:.6em 1.5em;flex-wrap:wrap}
header a{color:#fff}
header .brand{font-weight:700;color:#00ca8e;text-decoration:none}
header details{margin-left:auto}
header summary{cursor:pointer}
#token-form{display:flex;gap:.4em;align-items:center;margin:.4em 0}
#token-state{margin:.2em 0;font-size:.9em}
main{padding:1em 1.5em}
.banner{background:#fff3cd;color:#3d2c00;border-bottom:2px solid var(--amber);padding:.5em 1.5em;margin:0}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid var(--line);font-size:.92em}
th{color:var(--muted);font-weight:600}
.bar{width:14em;height:1em;background:var(--line);border-radius:3px;overflow:hidden;display:inline-block;vertical-align:middle}
.bar>span{display:block;height:100%;background:var(--green)}
.failed .bar>span{background:var(--red)}
.st{padding:.1em .5em;border-radius:3px;font-size:.85em;font-weight:600;white-space:nowrap}
.s-running{background:var(--blue);color:#fff}.s-succeeded{background:var(--green);color:#fff}
.s-failed{background:var(--red);color:#fff}.s-canceled{background:var(--grey);color:#fff}
.s-paused,.s-waiting{background:var(--amber);color:#1f2124}.s-pending{background:var(--line);color:#1f2124}
.err{color:var(--red)}.ok{color:var(--green)}
code{font-size:.95em}
a:focus-visible,button:focus-visible,input:focus-visible,summary:focus-visible{outline:3px solid var(--blue);outline-offset:2px}
button{font:inherit;padding:.3em .9em;border:1px solid var(--grey);border-radius:4px;background:#fff;color:var(--ink);cursor:pointer}
button:disabled{opacity:.5;cursor:not-allowed}
button.danger{border-color:var(--red);color:var(--red)}
#actions{border:1px solid var(--line);border-radius:4px;padding:.6em 1em;margin:1em 0}
#actions h2{margin:.2em 0 .4em;font-size:1.1em}
#action-msg{min-height:1.4em;margin:.5em 0 0}
#answer-form{margin-top:.6em}
#file-panel{border:1px solid var(--line);border-radius:4px;padding:.6em 1em;margin:0 0 1em}
#file-panel summary{cursor:pointer;font-weight:600}
.file-form{display:grid;grid-template-columns:max-content minmax(10em,24em);gap:.4em .8em;align-items:center;margin:.6em 0}
.file-form small{grid-column:2;color:var(--muted)}
.file-form button{grid-column:2;justify-self:start}
#plan h3{font-size:1em}
#file-submit{margin-top:.6em}
.tl-wrap{border:1px solid var(--line);border-radius:4px;margin:.4em 0}
.tl-allocs{max-height:28em;overflow-y:auto}
svg.timeline{display:block;width:100%;height:auto;font-size:10px}
svg.timeline text{fill:var(--ink)}
svg.timeline .axis text{fill:var(--muted)}
svg.timeline .grid{stroke:var(--line)}
svg.timeline .bstart{stroke:var(--grey);stroke-dasharray:3 3}
svg.timeline .restarting{fill:var(--blue)}
svg.timeline .gate{fill:var(--green)}
svg.timeline .open{opacity:.55}
svg.timeline .failed{fill:var(--red)}
svg.timeline .batch{fill:#8aa8e6}
svg.timeline .batch.failed{stroke:var(--red);stroke-width:2}
svg.timeline .metric-gate{fill:#b58cd9}
svg.timeline .metric-gate.failed,svg.timeline .metric-gate.would-fail{fill:var(--red)}
svg.timeline .mark.failed{fill:var(--red)}
svg.timeline .mark.skipped{fill:var(--grey)}
svg.timeline .budget-out{fill:#fbc98f;stroke:var(--amber)}
svg.timeline .over .budget-out{fill:#f2a7b0;stroke:var(--red)}
svg.timeline .budget-line{fill:none;stroke:var(--ink);stroke-width:1.5;stroke-dasharray:5 3}
svg.timeline .budget-peak{fill:var(--ink)}
svg.timeline .budget-over{fill:var(--red);font-weight:600}
svg.timeline .budget-label{paint-order:stroke;stroke:#fff;stroke-width:3px}
.legend span.lg-line{height:0;border-top:2px dashed var(--ink);border-radius:0}
.legend span{display:inline-block;width:.9em;height:.9em;vertical-align:middle;margin:0 .3em 0 1em;border-radius:2px}
`

var pageFrame = template.Must(template.New("frame").Funcs(pageFuncs).Parse(`
{{define "top"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{{.Title}}</title><style>` + pageStyle + `</style></head>
<body data-stream="{{.Stream}}"{{with .Status}} data-status="{{.}}"{{end}}{{with .Question}} data-question="{{.}}"{{end}}>
<header><a class="brand" href="/">nomad-restart</a><span>Agent <code>{{.Holder}}</code></span>
<details id="token-panel"><summary>ACL Token</summary>
<form id="token-form"><label for="token">Secret ID</label>
<input id="token" type="password" autocomplete="off" spellcheck="false" size="38">
<button type="submit">Set Token</button><button type="button" id="token-clear">Clear Token</button></form>
<p id="token-state" role="status"></p>
<p style="font-size:.85em;margin:.2em 0">The token stays in this browser tab (session storage) and goes with each action in a header; the agent acts with it and keeps nothing.</p>
</details></header>
<p id="stale" class="banner" role="alert" hidden></p>
<main>{{end}}
{{define "bottom"}}</main><script src="/page.js"></script></body></html>{{end}}
{{define "actions"}}<section id="actions" aria-labelledby="actions-h" data-base="/{{.Kind}}/{{.ID}}">
<h2 id="actions-h">Actions</h2>
<p style="margin:.2em 0 .6em;font-size:.9em">Each action runs with your ACL token (set it under <em>ACL Token</em> above), as <code>nomad-restart pause|resume|cancel|answer {{short .ID}}</code> would with it.{{with .Note}} {{.}}{{end}}</p>
<div role="group" aria-label="Steer this {{.Kind}}">
<button type="button" id="act-pause" data-action="pause">Pause</button>
<button type="button" id="act-resume" data-action="resume">Resume</button>
<button type="button" id="act-cancel" data-action="cancel" class="danger">Cancel {{.Kind}}</button>
</div>
<form id="answer-form" hidden><label for="answer">Answer: <span id="question-text"></span></label>
<input id="answer" name="answer" autocomplete="off" placeholder="{{.AnswerHint}}">
<button type="submit">Answer</button></form>
<p id="action-msg" role="status" aria-live="polite"></p>
</section>{{end}}
`))

var listPage = template.Must(template.Must(pageFrame.Clone()).Parse(fleetListTemplate + `{{template "top" .}}
<h1>Restarts</h1>
<details id="file-panel"><summary>New restart</summary>
<form id="file-form" class="file-form">
<label for="file-ns">Namespace</label><input id="file-ns" name="Namespace" value="default" autocomplete="off">
<label for="file-job">Job</label><input id="file-job" name="Job" required autocomplete="off" placeholder="job ID or unique prefix">
<label for="file-batch">Batch size</label><input id="file-batch" name="BatchSize" value="1" autocomplete="off" aria-describedby="file-batch-help">
<small id="file-batch-help">a count, a percentage like 25%, or sizes like 1,25%</small>
<label for="file-health">Health</label><select id="file-health" name="Health">
<option value="auto" selected>auto: checks where the groups define them, else running</option>
<option value="checks">checks</option><option value="running">running</option><option value="none">none (as nomad job restart)</option></select>
<label for="file-gates">Gates</label><textarea id="file-gates" name="Gates" rows="2" autocomplete="off" aria-describedby="file-gates-help" placeholder="errors: sum(rate(http_requests_total{job=&quot;{{"{{"}}job{{"}}"}}&quot;,code=~&quot;5..&quot;}[30s])) / sum(rate(http_requests_total{job=&quot;{{"{{"}}job{{"}}"}}&quot;}[30s])) < 0.02"></textarea>
<small id="file-gates-help">optional, one per line: NAME: PromQL OP NUMBER, judged after each batch on the agent's Prometheus (3 measurements 10s apart)</small>
<label for="file-drain-until">Drain until</label><textarea id="file-drain-until" name="DrainUntil" rows="2" autocomplete="off" aria-describedby="file-drain-until-help" placeholder="traefik=http://traefik:8080"></textarea>
<small id="file-drain-until-help">optional, one per line (as -drain-until): traefik=URL, haproxy=URL or haproxy=unix:/PATH, envoy=URL, or prometheus:QUERY; the drain ends once every one named stopped sending to the instance</small>
<label for="file-balancer-refresh">Balancer refresh</label><textarea id="file-balancer-refresh" name="BalancerRefresh" rows="1" autocomplete="off" aria-describedby="file-balancer-refresh-help" placeholder="traefik=5s"></textarea>
<small id="file-balancer-refresh-help">optional, one per line (as -balancer-refresh): traefik=DURATION or fabio=DURATION, how often that balancer, named by the services' tags, reads Consul where it differs from its default</small>
<button type="submit">Plan</button>
</form>
<p style="font-size:.9em;margin:.2em 0">The plan is a dry run: nothing changes until you file it. Both run with your ACL token, as <code>nomad-restart run -detach</code> would with it; an agent then drives the restart.</p>
<div id="plan"></div>
<button type="button" id="file-submit" hidden>File this restart</button>
<p id="file-msg" role="status" aria-live="polite"></p>
</details>
<div id="live">{{template "listLive" .Live}}</div>
{{template "bottom" .}}
{{define "plan"}}
<h3 id="plan-summary">Plan: restart {{len .Rec.Allocs}} allocations of job {{.Rec.JobID}} (namespace {{.Rec.Namespace}}, version {{.Rec.JobVersion}}) in {{len .Batches}} batches of {{.Batch}}, health {{.Rec.Spec.Health}}{{with .Rec.Spec.Gates}}, gates {{range $i, $g := .Specs}}{{if $i}}; {{end}}<code>{{$g}}</code>{{end}}{{end}}{{if .Skipped}}; {{.Skipped}} allocations left out (not running){{end}}</h3>
{{if gt .Rec.Spec.Drain 0}}<p class="plan-drain">Drain: before each allocation's restart, its instances of the Consul services stopped with no delay leave Consul's passing answers {{.Rec.Spec.DrainText}}, so that load balancers stop sending to them first.</p>
{{end}}{{range .Warnings}}<p class="err plan-warning" role="alert">Warning: {{.}}</p>
{{end}}<table id="plan-allocs"><thead><tr><th scope="col">Batch</th><th scope="col">Allocation</th><th scope="col">Name</th><th scope="col">Group</th><th scope="col">Node</th></tr></thead><tbody>
{{range $i, $b := .Batches}}{{range $b}}<tr class="planned"><td>{{add $i 1}}</td><td><code title="{{.ID}}">{{short .ID}}</code></td><td>{{.Name}}</td><td>{{.Group}}</td><td><code title="{{.NodeID}}">{{short .NodeID}}</code></td></tr>
{{end}}{{end}}</tbody></table>
{{end}}
{{define "listLive"}}
{{if .Error}}<p class="err" role="alert">Some restarts could not be read: {{.Error}}</p>{{end}}
{{template "fleetList" .}}
{{if not .Rows}}<p id="empty">No restarts.</p>{{else}}
<table id="restarts"><caption style="text-align:left;color:#5c6370">Newest first</caption>
<thead><tr><th scope="col">ID</th><th scope="col">Namespace</th><th scope="col">Job</th><th scope="col">Status</th><th scope="col">Progress</th><th scope="col">Driver</th><th scope="col">Submitted</th></tr></thead><tbody>
{{range .Rows}}<tr class="restart {{.Rec.Status}}" data-id="{{.Rec.ID}}" data-status="{{.Rec.Status}}">
<td><a href="/restart/{{.Rec.ID}}" title="{{.Rec.ID}}"><code>{{short .Rec.ID}}</code></a></td>
<td>{{.Rec.Namespace}}</td><td>{{.Rec.JobID}}</td>
<td><span class="st s-{{.Rec.Status}}">{{.Rec.Status}}</span></td>
<td><span class="bar" role="progressbar" aria-label="Progress of restart {{short .Rec.ID}}" aria-valuemin="0" aria-valuemax="100" aria-valuenow="{{.Percent}}"><span style="width:{{.Percent}}%"></span></span> {{.Progress}}</td>
<td>{{.Rec.Driver}}</td><td>{{when .Rec.CreateTime}}</td></tr>
{{end}}</tbody></table>{{end}}
{{end}}`))

var restartPage = template.Must(template.Must(pageFrame.Clone()).Parse(`{{template "top" .}}
<p><a href="/">&larr; Restarts</a></p>
<h1>Restart <code title="{{.Live.Rec.ID}}">{{short .Live.Rec.ID}}</code> of job {{.Live.Rec.JobID}}</h1>
{{template "actions" .Actions}}
<div id="live">{{template "restartLive" .Live}}</div>
{{template "bottom" .}}
{{define "restartLive"}}
<table id="summary">
<tr><th scope="row">Job</th><td>{{.Rec.JobID}} (namespace {{.Rec.Namespace}}, version {{.Rec.JobVersion}})</td></tr>
<tr><th scope="row">Status</th><td><span class="st s-{{.Rec.Status}}" id="status">{{.Rec.Status}}</span> {{.Rec.Reason}}{{if and .Rec.Control.Intent (ne (print .Rec.Control.Intent) "run") (not .Rec.Status.Terminal)}} (intent: {{.Rec.Control.Intent}}{{with .Rec.Control.By}} by {{.}}{{end}}){{end}}</td></tr>
<tr><th scope="row">Progress</th><td><span class="bar" role="progressbar" aria-label="Progress" aria-valuemin="0" aria-valuemax="100" aria-valuenow="{{.Percent}}"><span style="width:{{.Percent}}%"></span></span> {{.Progress}}</td></tr>
<tr><th scope="row">Driver</th><td>{{.Rec.Driver}}</td></tr>
<tr><th scope="row">Submitted</th><td>{{when .Rec.CreateTime}}</td></tr>
{{if .Rec.Question}}<tr><th scope="row">Question</th><td id="question">{{.Rec.Question.Text}} [{{.Rec.Question.Options}}]</td></tr>{{end}}
</table>
<h2 id="timeline-h">Timeline</h2>
{{template "timeline" .Timeline}}
<h2>Allocations</h2>
<table id="allocs"><thead><tr><th scope="col">Batch</th><th scope="col">Allocation</th><th scope="col">Name</th><th scope="col">Group</th><th scope="col">Node</th><th scope="col">State</th><th scope="col">Detail</th></tr></thead><tbody>
{{range .Rec.Allocs}}<tr class="alloc" data-state="{{.State}}"><td>{{.Batch}}</td><td><code title="{{.ID}}">{{short .ID}}</code></td><td>{{.Name}}</td><td>{{.Group}}</td><td><code title="{{.NodeID}}">{{short .NodeID}}</code></td><td>{{.State}}</td>
<td>{{if .Replacement}}replaced by <code title="{{.Replacement}}">{{short .Replacement}}</code> {{end}}{{if .Error}}<span class="err">{{.Error}}</span>{{else}}{{.Waiting}}{{end}}</td></tr>
{{end}}</tbody></table>
{{with .Rec.Notify}}{{if or .Sent .Failed}}<h2>Notifications</h2>
<p id="notifications-summary">{{.Sent}} sent, {{.Failed}} failed</p>
<table id="notifications"><thead><tr><th scope="col">Time</th><th scope="col">Sink</th><th scope="col">Event</th><th scope="col">Trigger</th><th scope="col">Outcome</th><th scope="col">Error</th></tr></thead><tbody>
{{range .Log}}<tr class="notification" data-outcome="{{.Outcome}}"><td>{{when .Time}}</td><td>{{.Sink}}</td><td>{{.Seq}}</td><td>{{.Trigger}}</td><td>{{.Outcome}}</td><td>{{with .Error}}<span class="err">{{.}}</span>{{end}}</td></tr>
{{end}}</tbody></table>{{end}}{{end}}
<h2>Events</h2>
<table id="events"><tbody>
{{range .Rec.Events}}<tr><td>{{when .Time}}</td><td>{{.Type}}</td><td>{{.Message}}</td></tr>
{{end}}</tbody></table>
{{end}}
{{define "timeline"}}
<p class="legend" id="timeline-legend">{{.Summary}}.<span style="background:#1563ff"></span>restart requested, until the tasks run again<span style="background:#15803d"></span>health gate, until healthy (the whole bar when the gate did not wait)<span style="background:#c73445"></span>failed<span style="background:#8aa8e6"></span>batch{{if .InFlight}} (pale: still in flight){{end}}{{if .Budget}}<span style="background:#fbc98f"></span>a group's allocations out of service because of the restart<span class="lg-line"></span>its availability budget{{end}}</p>
<div class="tl-wrap">
<svg class="timeline" id="timeline-batches" role="img" aria-labelledby="timeline-h timeline-legend" viewBox="0 0 {{.Width}} {{.BatchHeight}}" preserveAspectRatio="xMinYMin meet">
<g class="axis">{{range .Ticks}}<line class="grid" x1="{{.X}}" x2="{{.X}}" y1="{{$.AxisY}}" y2="{{$.BatchHeight}}"/><text x="{{.X}}" y="10" text-anchor="middle">{{.Label}}</text>{{end}}</g>
{{range .Batches}}<g class="tl-batch" data-batch="{{.N}}"><text x="4" y="{{add .Y 10}}">{{.Label}} ({{.Done}} done{{if .Failed}}, {{.Failed}} failed{{end}}{{if .Skipped}}, {{.Skipped}} skipped{{end}})</text>{{if .W}}<rect class="{{.Class}}" x="{{.X}}" y="{{add .Y 2}}" width="{{.W}}" height="10"><title>{{.Title}}</title></rect>{{end}}{{with .Gate}}<rect class="metric-gate {{.Class}}" x="{{.X}}" y="{{add .Y 2}}" width="{{.W}}" height="10"><title>{{.Title}}</title></rect>{{end}}</g>
{{end}}</svg>
{{if .Budget}}<svg class="timeline" id="timeline-budget" role="group" aria-label="Availability budget per group over time: allocations out of service because of the restart, against the budget" viewBox="0 0 {{.Width}} {{.BudgetHeight}}" preserveAspectRatio="xMinYMin meet">
<g class="axis">{{range .Ticks}}<line class="grid" x1="{{.X}}" x2="{{.X}}" y1="0" y2="{{$.BudgetHeight}}"/>{{end}}</g>
{{range .Budget}}<g class="tl-budget{{if .Over}} over{{end}}" data-group="{{.Group}}" data-peak="{{.Peak}}" data-budget="{{.PeakBudget}}" role="img" aria-label="{{.Label}}: {{.PeakLabel}}"><title>{{.Label}}: {{.PeakLabel}}</title><desc>{{.Desc}}</desc>
<text x="4" y="{{add .Y 16}}">{{.Label}}</text>{{if .Over}}<text class="budget-over" x="4" y="{{add .Y 30}}">over its budget</text>{{end}}
<path class="budget-out" d="{{.Area}}"/><path class="budget-line" d="{{.BudgetLine}}"/>
<circle class="budget-peak" cx="{{.PeakX}}" cy="{{.PeakY}}" r="2.5"/><text class="budget-label" x="{{.PeakX}}" y="{{add .PeakY -4}}"{{if .LabelAtEnd}} text-anchor="end"{{end}}>{{.PeakLabel}}</text></g>
{{end}}</svg>{{end}}
{{if .HasAllocRows}}<div class="tl-allocs" tabindex="0" role="region" aria-label="Allocations' timeline (scrolls)">
<svg class="timeline" id="timeline-allocs" role="img" aria-label="One row per allocation: restart requested, tasks running again, healthy or failed" viewBox="0 0 {{.Width}} {{.AllocHeight}}" preserveAspectRatio="xMinYMin meet">
<g class="axis">{{range .Ticks}}<line class="grid" x1="{{.X}}" x2="{{.X}}" y1="{{$.AxisY}}" y2="{{$.AllocHeight}}"/><text x="{{.X}}" y="10" text-anchor="middle">{{.Label}}</text>{{end}}</g>
{{range .BatchStarts}}<line class="bstart" x1="{{.}}" x2="{{.}}" y1="{{$.AxisY}}" y2="{{$.AllocHeight}}"/>{{end}}
{{range .Rows}}{{$y := .Y}}<g class="tl-row" data-alloc="{{.AllocID}}" data-outcome="{{.State}}"><text x="4" y="{{add $y 10}}">{{.Label}}</text>{{range .Bars}}<rect class="tl-bar {{.Class}}" x="{{.X}}" y="{{add $y 2}}" width="{{.W}}" height="10"><title>{{.Title}}</title></rect>{{end}}{{with .Mark}}<text class="mark {{.Class}}" x="{{.X}}" y="{{add $y 11}}" text-anchor="middle">✕<title>{{.Title}}</title></text>{{end}}</g>
{{end}}</svg></div>{{end}}
</div>
{{end}}`))
