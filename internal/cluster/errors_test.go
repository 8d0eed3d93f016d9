package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// answerCase is one of Nomad's error answers, its status and text as its HTTP agent gives
// them, and what the package makes of it: transient or permanent, and (where a test asks;
// nil where it does not) the sentinel error it matches.
type answerCase struct {
	name      string
	code      int
	text      string
	transient bool
	kind      error
}

// TestNomadAnswersClassified: Nomad's answers, by status and text as its HTTP agent gives
// them (most RPC errors are a 500 with the error's text; through a client agent or a
// follower server they come after "rpc error: "), are transient or permanent as the texts
// in Nomad's source say.
func TestNomadAnswersClassified(t *testing.T) {
	for _, tc := range []answerCase{
		// Permanent: limits, validation, check-and-set, ACLs, unknown objects.
		{"job_max_count on scale", 500, "total count was greater than configured job_max_count: 100000002 > 50000", false, nil},
		{"job_max_count relayed", 500, "rpc error: total count was greater than configured job_max_count: 5 > 4", false, nil},
		{"job validation", 500, "1 error occurred:\n\t* total count was greater than configured job_max_count: 5 > 4\n\n", false, nil},
		{"job validation, several", 500, "2 errors occurred:\n\t* Missing job datacenters\n\t* Missing job task groups\n\n", false, nil},
		{"check-and-set", 500, "Enforcing job modify index 5: job exists with conflicting job modify index: 6", false, nil},
		{"permission denied", 403, "Permission denied", false, nil},
		{"token not found", 403, "ACL token not found", false, nil},
		{"permission denied relayed as a 500", 500, "rpc error: Permission denied", false, nil},
		{"registration disabled", 403, "Job registration, dispatch, and scale are disabled by the scheduler configuration", false, nil},
		{"nonexistent namespace", 500, `job "web" is in nonexistent namespace "nope"`, false, nil},
		{"unknown deployment", 500, `Unknown deployment "abc"`, false, nil},
		{"terminal deployment", 500, "can't fail terminal deployment", false, nil},
		{"task not running", 500, "Task not running", false, nil},
		{"scale blocked", 400, "job scaling blocked due to active deployment", false, nil},
		{"over the policy's max", 400, "group count was greater than scaling policy maximum: 5 > 3", false, nil},
		{"not implemented", 501, "Invalid method", false, nil},
		{"not found", 404, "job not found", false, nil},
		{"bad request", 400, "Invalid index", false, nil},
		{"unknown allocation", 500, "Unknown allocation \"x\"", false, nil},
		{"should not run", 500, "restart of an alloc that should not run", false, nil},
		{"conflict", 409, "check-and-set failed", false, nil},
		// Transient: a lost or new leader, Raft, RPC timeouts and lost connections, a
		// proxy or Nomad saying it cannot answer now, rate limits.
		{"no leader", 500, "No cluster leader", true, nil},
		{"no leader relayed", 500, "rpc error: No cluster leader", true, nil},
		{"no leader, coded", 503, "No cluster leader", true, nil},
		{"new leader", 500, "Not ready to serve consistent reads", true, nil},
		{"leadership lost", 500, "leadership lost while committing log", true, nil},
		{"raft enqueue timeout", 500, "timed out enqueuing operation", true, nil},
		{"rpc timeout", 500, "rpc error: failed to get conn: dial tcp 10.0.0.2:4647: i/o timeout", true, nil},
		{"rpc EOF", 500, "rpc error: EOF", true, nil},
		{"yamux timeout", 500, "rpc error: i/o deadline reached", true, nil},
		{"unavailable", 503, "Service Unavailable", true, nil},
		{"bad gateway", 502, "bad gateway", true, nil},
		{"gateway timeout", 504, "gateway timeout", true, nil},
		{"too many requests", 429, "Your IP is issuing too many concurrent connections, please rate limit your calls", true, nil},
		{"too many requests, in other words", 429, "slow down", true, nil},
		{"unavailable, in lower case", 503, "service unavailable", true, nil},
		// A 500 of neither kind passes: the retry's budget bounds what it costs.
		{"unknown 500", 500, "something unexpected", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := nomadAnswer(t, tc.code, tc.text)
			if got := IsTransient(err); got != tc.transient {
				t.Errorf("IsTransient(%d %q) = %v, want %v", tc.code, tc.text, got, tc.transient)
			}
			if got := IsTransient(fmt.Errorf("flattened: %v", err)); got != tc.transient {
				t.Errorf("IsTransient of its text only (%v) = %v, want %v", err, got, tc.transient)
			}
		})
	}
}

// TestScaleGroupRefusals maps Nomad's refusals of the scale endpoint (texts of
// nomad/job_endpoint.go's Job.Scale) onto the package's errors.
func TestScaleGroupRefusals(t *testing.T) {
	for _, tc := range []answerCase{
		{"check-and-set", http.StatusInternalServerError, "rpc error: job register enforce index 7: job exists with conflicting job modify index: 9", false, ErrScaleConflict},
		{"active deployment", http.StatusBadRequest, "job scaling blocked due to active deployment", false, ErrScaleBlocked},
		{"denied", http.StatusForbidden, "Permission denied", false, ErrPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, tc.code, tc.text) })
			_, err := n.ScaleGroup(context.Background(), "default", "web", "web", 2, 7, "x")
			if !errors.Is(err, tc.kind) {
				t.Fatalf("%v, want %v", err, tc.kind)
			}
			if IsTransient(err) != tc.transient {
				t.Errorf("IsTransient(%v) = %v", err, !tc.transient)
			}
		})
	}
}

// TestJobMaxCountError: Nomad's job_max_count refusal is read, with the total and the limit,
// from the api client's error or from a relayed text; nothing else is one.
func TestJobMaxCountError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		total, max int
	}{
		{"scale", nomadAnswer(t, 500, "total count was greater than configured job_max_count: 100000002 > 50000"), 100000002, 50000},
		{"relayed", nomadAnswer(t, 500, "rpc error: total count was greater than configured job_max_count: 5 > 4"), 5, 4},
		{"flattened", errors.New("scaling: Unexpected response code: 500 (total count was greater than configured job_max_count: 3 > 2)"), 3, 2},
		{"another 500", nomadAnswer(t, 500, "No cluster leader"), 0, 0},
		{"garbled", errors.New("total count was greater than configured job_max_count: many"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := asJobMaxCount(classifyScale(tc.err))
			if tc.max == 0 {
				if got != nil {
					t.Fatalf("read %+v, want none", got)
				}
				return
			}
			want := fmt.Sprintf("total count was greater than configured job_max_count: %d > %d", tc.total, tc.max)
			if got == nil || got.Total != tc.total || got.Max != tc.max || got.Nomad != want {
				t.Fatalf("read %+v, want %d > %d", got, tc.total, tc.max)
			}
			var as *JobMaxCountError
			if !errors.As(fmt.Errorf("scaling: %w", classifyScale(tc.err)), &as) || IsTransient(as) {
				t.Errorf("classifyScale(%v): not a permanent *JobMaxCountError", tc.err)
			}
		})
	}
}

// TestJobMaxCountOf: the limit as /v1/agent/self shows a server's configuration: null is
// Nomad's default, 0 no limit; a client agent's configuration says nothing of the servers'.
func TestJobMaxCountOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config map[string]any
		want   int
	}{
		{"server, unset", map[string]any{"Server": map[string]any{"Enabled": true, "JobMaxCount": nil}}, 50000},
		{"server, set", map[string]any{"Server": map[string]any{"Enabled": true, "JobMaxCount": float64(10)}}, 10},
		{"server, no limit", map[string]any{"Server": map[string]any{"Enabled": true, "JobMaxCount": float64(0)}}, 0},
		{"client agent", map[string]any{"Server": map[string]any{"Enabled": false, "JobMaxCount": nil}}, 0},
		{"no server block", map[string]any{}, 0},
	} {
		if got := jobMaxCountOf(tc.config); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
