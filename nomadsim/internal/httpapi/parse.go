package httpapi

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// parseJobSpec reads a job specification given to /v1/jobs/parse. Only the JSON forms are
// understood (a bare job or {"Job": ...}); Nomad's own CLI parses HCL locally.
func parseJobSpec(spec string) (*api.Job, error) {
	s := strings.TrimSpace(spec)
	if !strings.HasPrefix(s, "{") {
		return nil, errors.New("nomadsim parses JSON job specifications only; HCL is parsed by the Nomad CLI before submission")
	}
	var wrapped struct{ Job *api.Job }
	if err := json.Unmarshal([]byte(s), &wrapped); err == nil && wrapped.Job != nil {
		return wrapped.Job, nil
	}
	var job api.Job
	if err := json.Unmarshal([]byte(s), &job); err != nil {
		return nil, err
	}
	return &job, nil
}
