package agenttest

import (
	"context"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
)

// DeadDriverLock takes the lock of the lease variable at path, in namespace ns, as holder,
// the way a driver killed right after taking it leaves it: never renewed, so Nomad expires
// it after its TTL (10 s, which Nomad's leader doubles) and its lock delay (100 ms). It
// reports whether the lock was free to take.
func (e *Env) DeadDriverLock(ctx context.Context, ns, path, holder string) (bool, error) {
	v := &api.Variable{Namespace: ns, Path: path, Items: map[string]string{"holder": holder},
		Lock: &api.VariableLock{TTL: "10s", LockDelay: "100ms"}}
	got, _, err := e.Client.Variables().AcquireLock(v, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return false, err
	}
	return got.LockID() != "", nil
}

// FleetLeasePath is the path of the fleet's lease variable, as the fleets' store keeps it.
func FleetLeasePath(rec *fleet.Record) string {
	return "nomad-restart/" + nomadstore.FleetsDir + "/" + rec.ID + "/lease"
}

// RestartLeasePath finds the path of restart id's lease variable: beside its head, whose
// path ends with the ID (the restarts' store alone knows the rest of the layout).
func (e *Env) RestartLeasePath(t testing.TB, ns, id string) string {
	t.Helper()
	metas, _, err := e.Client.Variables().PrefixList("nomad-restart/", &api.QueryOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metas {
		if len(m.Path) >= len(id) && m.Path[len(m.Path)-len(id):] == id {
			return m.Path + "/lease"
		}
	}
	t.Fatalf("no head variable for restart %s", id)
	return ""
}
