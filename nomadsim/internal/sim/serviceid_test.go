package sim

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestServiceID: the IDs of Nomad's MakeAllocServiceID, tags or not, port label or not.
func TestServiceID(t *testing.T) {
	const alloc = "b4e61df9-b095-d64e-f241-23860da1375f"
	for _, tc := range []struct {
		owner string
		svc   api.Service
		want  string
	}{
		{"redis", api.Service{Name: "redis-http", PortLabel: "http"}, "_nomad-task-" + alloc + "-redis-redis-http-http"},
		{"redis", api.Service{Name: "db", PortLabel: "db", Tags: []string{"a", "b"}}, "_nomad-task-" + alloc + "-redis-db-db"},
		{"group-web", api.Service{Name: "web"}, "_nomad-task-" + alloc + "-group-web-web-"},
	} {
		if got := serviceID(alloc, tc.owner, &tc.svc); got != tc.want {
			t.Errorf("serviceID(%s, %+v) = %s, want %s", tc.owner, tc.svc, got, tc.want)
		}
	}
}
