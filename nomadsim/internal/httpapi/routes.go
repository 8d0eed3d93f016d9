package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// The routing: every endpoint of the API, each behind the middleware.

// endpoint is one registered endpoint.
type endpoint struct {
	pattern string // ServeMux pattern, e.g. "/v1/job/{id}/allocations"
	h       http.HandlerFunc
}

func (c *server) routes() []endpoint {
	return []endpoint{
		{"/v1/jobs", c.handleJobs},
		{"/v1/jobs/parse", c.handleJobsParse},
		{"/v1/job/{id}", c.handleJob},
		{"/v1/job/{id}/versions", c.handleJobVersions},
		{"/v1/job/{id}/allocations", c.handleJobAllocations},
		{"/v1/job/{id}/evaluations", c.handleJobEvaluations},
		{"/v1/job/{id}/deployments", c.handleJobDeployments},
		{"/v1/job/{id}/deployment", c.handleJobDeployment},
		{"/v1/job/{id}/evaluate", c.handleJobEvaluate},
		{"/v1/job/{id}/scale", c.handleJobScale},
		{"/v1/job/{id}/summary", c.handleJobSummary},
		{"/v1/job/{id}/plan", c.handleJobPlan},
		{"/v1/job/{id}/submission", c.handleJobSubmission},
		{"/v1/job/{id}/services", c.handleJobServices},
		{"/v1/job/{id}/stable", c.handleJobStable},
		{"/v1/job/{id}/revert", c.handleJobRevert},
		{"/v1/validate/job", c.handleValidateJob},
		{"/v1/allocations", c.handleAllocations},
		{"/v1/allocation/{id}", c.handleAllocation},
		{"/v1/allocation/{id}/stop", c.handleAllocStop},
		{"/v1/allocation/{id}/services", c.handleAllocServices},
		{"/v1/client/allocation/{id}/restart", c.handleAllocRestart},
		{"/v1/client/allocation/{id}/checks", c.handleAllocChecks},
		{"/v1/client/allocation/{id}/stats", c.handleAllocStats},
		{"/v1/client/fs/", c.handleFs},
		{"/v1/evaluations", c.handleEvaluations},
		{"/v1/evaluation/{id}", c.handleEvaluation},
		{"/v1/evaluation/{id}/allocations", c.handleEvaluationAllocations},
		{"/v1/deployments", c.handleDeployments},
		{"/v1/deployment/{id}", c.handleDeployment},
		{"/v1/deployment/allocations/{id}", c.handleDeploymentAllocations},
		{"/v1/deployment/promote/{id}", c.handleDeploymentPromote},
		{"/v1/deployment/fail/{id}", c.handleDeploymentFail},
		{"/v1/deployment/pause/{id}", c.handleDeploymentPause},
		{"/v1/nodes", c.handleNodes},
		{"/v1/node/{id}", c.handleNode},
		{"/v1/node/{id}/allocations", c.handleNodeAllocations},
		{"/v1/agent/self", c.handleAgentSelf},
		{"/v1/agent/members", c.handleAgentMembers},
		{"/v1/agent/health", c.handleAgentHealth},
		{"/v1/status/leader", c.handleStatusLeader},
		{"/v1/status/peers", c.handleStatusPeers},
		{"/v1/regions", c.handleRegions},
		{"/v1/namespaces", c.handleNamespaces},
		{"/v1/namespace", c.handleNamespaceCreate},
		{"/v1/namespace/{name}", c.handleNamespace},
		{"/v1/services", c.handleServices},
		{"/v1/service/{name}", c.handleService},
		{"/v1/event/stream", c.handleEventStream},
	}
}

// Handler is Nomad's HTTP API on the cluster's state; life is the cluster's life.
func Handler(life context.Context, c *sim.Cluster) http.Handler {
	return (&server{Cluster: c, life: life}).handler()
}

// handler builds the Nomad HTTP API.
func (c *server) handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range c.routes() {
		mux.Handle(rt.pattern, c.wrap(routeName(rt.pattern), rt.h))
	}
	mux.Handle("/v1/var/", c.wrap("/v1/var/:path", c.Ext.Vars.Handler().ServeHTTP))
	mux.Handle("/v1/vars", c.wrap("/v1/vars", c.Ext.Vars.Handler().ServeHTTP))
	mux.Handle("/v1/acl/", c.wrap("/v1/acl/:rest", c.Ext.ACL.Handler().ServeHTTP))
	mux.Handle("/", c.wrap("/", func(w http.ResponseWriter, r *http.Request) {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusNotFound, "Invalid URL"))
	}))
	return mux
}

// routeName turns a ServeMux pattern into Nomad's ":param" notation.
func routeName(pattern string) string {
	parts := strings.Split(pattern, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			parts[i] = ":" + strings.TrimSuffix(strings.TrimPrefix(p, "{"), "...}")
			parts[i] = strings.TrimSuffix(parts[i], "}")
		}
	}
	return strings.Join(parts, "/")
}
