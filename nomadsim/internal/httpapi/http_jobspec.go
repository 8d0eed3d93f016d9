package httpapi

import (
	"net/http"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// The endpoints that read a job specification without touching the cluster: parsing one
// and validating one.

// handleJobsParse answers /v1/jobs/parse. HCL parsing is not simulated: a JSON job body
// (as "nomad job run -json" sends) is accepted, HCL is refused with a clear message.
func (c *server) handleJobsParse(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	var req api.JobsParseRequest
	if err := decodeBody(r, &req); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	job, err := parseJobSpec(req.JobHCL)
	if err != nil {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, err.Error()))
		return
	}
	if req.Canonicalize {
		job.Canonicalize()
	}
	simhttp.WriteJSON(w, job)
}

func (c *server) handleValidateJob(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	var req api.JobValidateRequest
	if err := decodeJobBody(r, &req, &req.Job, ""); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	out := &api.JobValidateResponse{DriverConfigValidated: true}
	if err := sim.ValidateJob(req.Job, c.JobMaxCount()); err != nil {
		out.Error = err.Error()
		out.ValidationErrors = []string{err.Error()}
	}
	simhttp.WriteJSON(w, out)
}
