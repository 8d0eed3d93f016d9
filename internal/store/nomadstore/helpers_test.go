package nomadstore_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The environment the store tests share: a simulated Nomad, the stores opened on it, and
// the clients that look at its variables behind the stores' backs.

// quiet discards the warnings a lost lease logs on purpose in these tests.
var quiet = slog.New(slog.DiscardHandler)

// varsOn is the variables client the stores under test use, on cl.
func varsOn(cl *api.Client) *nomadvars.Client {
	return nomadvars.New(cl, nomadvars.Options{})
}

// restartsOn opens a restart store with opts through cl.
func restartsOn(cl *api.Client, opts nomadstore.Options) *nomadstore.Restarts {
	return nomadstore.NewRestarts(varsOn(cl), opts)
}

// fleetsOn opens a fleet store with opts through cl.
func fleetsOn(cl *api.Client, opts nomadstore.Options) *nomadstore.Fleets {
	return nomadstore.NewFleets(varsOn(cl), opts)
}

// runNomadSuite runs the stores' suite on restart stores opened with opts, each test on a
// simulated Nomad of its own.
func runNomadSuite(t *testing.T, opts nomadstore.Options) {
	storetest.RunSuite(t, func(t *testing.T) storetest.Backend {
		c := simtest.Start(t, nomadsim.Options{})
		return storetest.Backend{BellOnly: true, Open: func(t *testing.T) store.Store {
			return restartsOn(simtest.Client(t, c), opts)
		}}
	})
}

// startWithACLs starts a simulated Nomad that enforces ACLs, for the tests of what a
// token may do; its tokens are made with simtest.Token.
func startWithACLs(t testing.TB) *nomadsim.Cluster {
	t.Helper()
	return simtest.Start(t, nomadsim.Options{ACLs: true})
}

// restartsAs opens a restart store on c that acts with token.
func restartsAs(t testing.TB, c *nomadsim.Cluster, token string) *nomadstore.Restarts {
	t.Helper()
	return restartsOn(simtest.ClientAs(t, c, token), nomadstore.Options{})
}

// fleetsAs opens a fleet store on c that acts with token.
func fleetsAs(t testing.TB, c *nomadsim.Cluster, token string) *nomadstore.Fleets {
	t.Helper()
	return fleetsOn(simtest.ClientAs(t, c, token), nomadstore.Options{})
}

// startFleets starts a simulated Nomad and opens a fleet store and a restart store on it,
// with the management client they use.
func startFleets(t testing.TB, opts nomadstore.Options) (*api.Client, *nomadstore.Fleets, *nomadstore.Restarts) {
	t.Helper()
	cl := simtest.Client(t, simtest.Start(t, nomadsim.Options{}))
	vars := varsOn(cl)
	return cl, nomadstore.NewFleets(vars, opts), nomadstore.NewRestarts(vars, opts)
}

// startNomadStore starts a simulated Nomad and opens a store with opts on it.
func startNomadStore(t testing.TB, opts nomadstore.Options) (*api.Client, *nomadstore.Restarts) {
	t.Helper()
	cl := simtest.Client(t, simtest.Start(t, nomadsim.Options{}))
	return cl, restartsOn(cl, opts)
}

// releaseUnder releases, through another client, the lock of lease variable path under l
// (as Nomad does when the lock's TTL ran out during a partition), and waits until l says it
// is lost.
func releaseUnder(t testing.TB, ctx context.Context, cl *api.Client, path string, l store.Lease) {
	t.Helper()
	v, _, err := cl.Variables().Read(path, nil)
	if err != nil || v.LockID() == "" {
		t.Fatalf("reading the lease variable: %v, %+v", err, v)
	}
	if _, _, err := cl.Variables().ReleaseLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: v.LockID()}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the lock was released under the lease but Lost was never closed")
	}
}

// variableSize is the bytes of the items of the variable at path, as Nomad counts them
// against its limit of 64 KiB.
func variableSize(t testing.TB, cl *api.Client, path string) int {
	t.Helper()
	v, _, err := cl.Variables().Read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for k, val := range v.Items {
		size += len(k) + len(val)
	}
	return size
}

// variablesUnder lists the paths of the variables under prefix in namespace default.
func variablesUnder(t testing.TB, cl *api.Client, prefix string) []string {
	t.Helper()
	metas, _, err := cl.Variables().PrefixList(prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range metas {
		out = append(out, m.Path)
	}
	return out
}

// exists reports whether the variable at path exists in namespace default.
func exists(t testing.TB, cl *api.Client, path string) bool {
	t.Helper()
	v, _, err := cl.Variables().Peek(path, (&api.QueryOptions{}).WithContext(context.Background()))
	if err != nil && !strings.Contains(err.Error(), "404") {
		t.Fatal(err)
	}
	return v != nil
}
