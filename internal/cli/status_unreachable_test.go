package cli

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	_ = l.Close()
	return addr
}

// TestStatusNomadUnreachable: status warns that Nomad could not be read, lists the local
// records it has, and exits 1 when it has none.
func TestStatusNomadUnreachable(t *testing.T) {
	ctx := testCtx(t)
	e := cliEnv{addr: closedAddr(t), localDir: t.TempDir()}
	code, out, errOut := e.run(ctx, "status")
	if code != 1 || !strings.Contains(errOut, "the Nomad store could not be read (Nomad at "+e.addr) {
		t.Fatalf("status with nothing readable: exit %d, want 1\n%s\n%s", code, out, errOut)
	}

	// A record of this cluster in the local store is still listed, with the warning, exit 0.
	if err := store.ScopeToCluster(e.localStore(t), store.ClusterName(e.addr)).Create(ctx, storetest.NewRecord("default", "web", 1)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = e.run(context.WithoutCancel(ctx), "status")
	if code != 0 || !strings.Contains(out, "web") || !strings.Contains(errOut, "could not be read") {
		t.Fatalf("status with local records: exit %d, want 0 with the record and a warning\n%s\n%s", code, out, errOut)
	}
}
