package cluster_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestE2EListJobs(t *testing.T) {
	sim := startSim(t, nomadsim.Options{ACLs: true})
	createNamespaces(t, sim, "team")
	register(t, sim, serviceJob("default", "web", 1), serviceJob("default", "api", 1), serviceJob("team", "batch", 1))
	ctx := testCtx(t)
	n := newNomad(t, sim, sim.BootstrapToken())

	cases := []struct {
		namespace string
		want      []cluster.JobRef
	}{
		{"default", []cluster.JobRef{{Namespace: "default", ID: "api"}, {Namespace: "default", ID: "web"}}},
		{"team", []cluster.JobRef{{Namespace: "team", ID: "batch"}}},
		{"*", []cluster.JobRef{{Namespace: "default", ID: "api"}, {Namespace: "default", ID: "web"}, {Namespace: "team", ID: "batch"}}},
	}
	for _, tc := range cases {
		got, err := n.ListJobs(ctx, tc.namespace)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ListJobs(%q) = %+v, %v; want %+v", tc.namespace, got, err, tc.want)
		}
	}

	reader := newNomad(t, sim, createToken(t, sim, "reader", `namespace "default" { capabilities = ["read-job"] }`))
	if _, err := reader.ListJobs(ctx, "default"); !errors.Is(err, cluster.ErrPermissionDenied) {
		t.Errorf("listing without list-jobs: %v, want ErrPermissionDenied", err)
	}
}
