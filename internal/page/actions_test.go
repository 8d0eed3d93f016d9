package page

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// A refused action says why with the status to answer; an ACL denial names the capability
// and the rule to grant, whichever kind of record it was asked of.
func TestRefusalWording(t *testing.T) {
	denied := &store.PermissionError{Capability: "write", Namespace: "prod", Path: "nomad-restart/web/0123", Prefix: "nomad-restart"}
	tests := []struct {
		name   string
		err    error
		status int
		says   []string
	}{
		{"a denied variable write names the capability and the rule", fmt.Errorf("storing: %w", denied), http.StatusForbidden,
			[]string{"Permission denied", `"write"`, `namespace "prod" { variables { path "nomad-restart/*"`, "deploy/operator-policy.hcl"}},
		{"a pending cancel", &steer.CancelingError{ID: "0123456789abcdef", By: "ops", Verb: "pause"}, http.StatusConflict,
			[]string{"being canceled", "a cancel from this page"}},
		{"a restart the token cannot read", store.ErrNotFound, http.StatusForbidden, []string{"Permission denied", "cannot pause restart 01234567", "cannot read", "ACL Token", `namespace "prod"`}},
		{"another restart of the job runs", &store.JobBusyError{JobID: "web", RestartID: "fedcba9876543210"}, http.StatusConflict,
			[]string{`job "web" already has restart fedcba98 in progress`, "/restart/fedcba9876543210"}},
		{"a fleet the token cannot read", store.ErrFleetNotFound, http.StatusForbidden, []string{"Permission denied", "cannot read the fleet", `namespace "prod"`}},
		{"a record that ended meanwhile", &steer.EndedError{Kind: steer.KindFleet, ID: "0123456789abcdef", Status: restart.StatusSucceeded, Verb: "pause"}, http.StatusConflict,
			[]string{"fleet 01234567 has already ended (succeeded)"}},
		{"an answer nobody waits for", fmt.Errorf("%w: fleet 01234567 is running", steer.ErrNoQuestion), http.StatusConflict, []string{"not waiting for an answer"}},
		{"anything else", errors.New("connection refused"), http.StatusBadGateway, []string{"pause restart 01234567: connection refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, text := refusal("pause restart 01234567", "prod", tt.err)
			if status != tt.status {
				t.Errorf("status = %d, want %d", status, tt.status)
			}
			for _, s := range tt.says {
				if !strings.Contains(text, s) {
					t.Errorf("%q lacks %q", text, s)
				}
			}
		})
	}
}
