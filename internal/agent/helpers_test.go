package agent

import (
	"context"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// shippedToken returns a token holding the policy the project ships for role ("operator",
// "agent": deploy/<role>-policy.hcl), as docs/acl.md tells operators to create it.
func (e *env) shippedToken(t *testing.T, role string) string {
	t.Helper()
	token, err := e.sim.CreateToken(role, map[string]string{"nomad-restart-" + role: policy(t, role+"-policy.hcl")})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// shippedClient is an api client with shippedToken(role).
func (e *env) shippedClient(t *testing.T, role string) *api.Client {
	t.Helper()
	cl, err := e.sim.APIClient(e.shippedToken(t, role))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitSucceeded waits for rec to end and reports (without stopping the test) a restart that
// did not succeed or whose drivers overlapped; it returns the final record.
func (e *env) waitSucceeded(t *testing.T, rec *restart.Record) *restart.Record {
	t.Helper()
	final := e.waitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Errorf("restart of %s ended %s (%s)", rec.JobID, final.Status, final.Reason)
	}
	if bad := driverOverlaps(final); bad != nil {
		t.Errorf("restart of %s: %v", rec.JobID, bad)
	}
	return final
}

// testContext is a context that ends after testTimeout, or with the test.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
