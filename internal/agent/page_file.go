package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// fileRequest is the page's form for a new restart: what `nomad-restart run -detach`
// takes, in its simplest form.
type fileRequest struct {
	Namespace string
	Job       string
	BatchSize string // -batch-size: "1", "25%", "1,25%"
	Health    string // -health: auto, checks, running, none
	// Expect lists the planned allocations the user reviewed, in order (filing only): the
	// restart is filed only if planning again gives the same.
	Expect []string
}

func (f fileRequest) request() (engine.Request, error) {
	req := engine.Request{Namespace: strings.TrimSpace(f.Namespace), Job: strings.TrimSpace(f.Job)}
	if req.Job == "" {
		return req, errors.New("give the job to restart (its ID or a unique prefix)")
	}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	if strings.TrimSpace(f.BatchSize) != "" {
		sizes, err := restart.ParseBatchSizes(f.BatchSize)
		if err != nil {
			return req, err
		}
		req.Spec.BatchSizes = sizes
	}
	if strings.TrimSpace(f.Health) != "" {
		h, err := restart.ParseHealthMode(f.Health)
		if err != nil {
			return req, err
		}
		req.Spec.Health = h
	}
	return req, nil
}

// planResult answers a plan: the plan drawn for review, and its allocations in order.
type planResult struct {
	HTML   string   `json:"html"`
	Allocs []string `json:"allocs"`
}

// filed answers a filing: the new restart's ID, for the page to open.
type filed struct {
	Message string `json:"message"`
	ID      string `json:"id"`
}

// servePlan plans a restart with the request's token and shows the plan; nothing is
// written (a dry run).
func (a *Agent) servePlan(w http.ResponseWriter, r *http.Request) {
	req, steer, ok := a.fileStart(w, r, nil)
	if !ok {
		return
	}
	p, ok := a.planWith(w, r.Context(), steer, req)
	if !ok {
		return
	}
	html, err := renderString(listPage, "plan", newPlanView(p))
	if err != nil {
		writeResult(w, http.StatusInternalServerError, actionResult{Error: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(planResult{HTML: html, Allocs: planAllocs(p)})
}

// serveFile plans again and, when the plan is the one the user reviewed, records the
// restart for an agent to drive (as `run -detach`), with the request's token.
func (a *Agent) serveFile(w http.ResponseWriter, r *http.Request) {
	var form fileRequest
	req, steer, ok := a.fileStart(w, r, &form)
	if !ok {
		return
	}
	p, ok := a.planWith(w, r.Context(), steer, req)
	if !ok {
		return
	}
	if !slices.Equal(planAllocs(p), form.Expect) {
		writeResult(w, http.StatusConflict, actionResult{Error: fmt.Sprintf("the allocations of job %q changed since you reviewed the plan: review the new plan and file it again", p.Record.JobID)})
		return
	}
	if err := steer.Create(r.Context(), p.Record); err != nil {
		status, text := steerFailure("file a restart of job "+p.Record.JobID, p.Record.Namespace, err)
		a.log.Info("restart from the page refused", "namespace", p.Record.Namespace, "job", p.Record.JobID, "status", status)
		writeResult(w, status, actionResult{Error: text})
		return
	}
	a.log.Info("restart filed from the page", "restart", p.Record.ID, "namespace", p.Record.Namespace, "job", p.Record.JobID)
	a.page.changed()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(filed{ID: p.Record.ID,
		Message: fmt.Sprintf("Restart %s of job %q filed; an agent drives it.", short(p.Record.ID), p.Record.JobID)})
}

// fileStart decodes the form (into form when not nil) and builds the steering for the
// request's token, answering the error itself when it fails.
func (a *Agent) fileStart(w http.ResponseWriter, r *http.Request, form *fileRequest) (engine.Request, Steerer, bool) {
	if a.cfg.Steer == nil {
		writeResult(w, http.StatusNotImplemented, actionResult{Error: "this agent does not file restarts from its page; use `nomad-restart run -detach <job>`"})
		return engine.Request{}, nil, false
	}
	if form == nil {
		form = &fileRequest{}
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(form); err != nil {
		writeResult(w, http.StatusBadRequest, actionResult{Error: "the request body is not JSON like {\"Job\": \"web\"}: " + err.Error()})
		return engine.Request{}, nil, false
	}
	req, err := form.request()
	if err != nil {
		writeResult(w, http.StatusBadRequest, actionResult{Error: err.Error()})
		return engine.Request{}, nil, false
	}
	steer, err := a.cfg.Steer(r.Header.Get(TokenHeader))
	if err != nil {
		writeResult(w, http.StatusBadGateway, actionResult{Error: "connecting to Nomad with your token: " + err.Error()})
		return engine.Request{}, nil, false
	}
	return req, steer, true
}

// planWith plans req with steer, answering the error itself when it fails.
func (a *Agent) planWith(w http.ResponseWriter, ctx context.Context, steer Steerer, req engine.Request) (*engine.Plan, bool) {
	p, err := steer.Plan(ctx, req)
	if err == nil {
		return p, true
	}
	status, text := http.StatusBadRequest, err.Error() // the job, the deployment, the groups: the form's to fix
	if errors.Is(err, cluster.ErrPermissionDenied) {
		status, text = http.StatusForbidden, "Permission denied: "+text
	}
	writeResult(w, status, actionResult{Error: text})
	return nil, false
}

func planAllocs(p *engine.Plan) []string {
	out := make([]string, 0, len(p.Record.Allocs))
	for _, a := range p.Record.Allocs {
		out = append(out, a.ID)
	}
	return out
}

// planView is a plan as the page shows it for review.
type planView struct {
	Rec     *restart.Record
	Batches [][]restart.AllocProgress
	Skipped int
	Batch   string
}

func newPlanView(p *engine.Plan) planView {
	v := planView{Rec: p.Record, Skipped: len(p.Skipped), Batch: restart.FormatBatchSizes(p.Record.Spec.BatchSizes)}
	for _, al := range p.Record.Allocs {
		for len(v.Batches) < al.Batch {
			v.Batches = append(v.Batches, nil)
		}
		v.Batches[al.Batch-1] = append(v.Batches[al.Batch-1], al)
	}
	return v
}
