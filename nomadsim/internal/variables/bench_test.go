package variables

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

// BenchmarkCheckedUpdate measures a check-and-set write through the HTTP API and the
// official client, the store's hot path.
func BenchmarkCheckedUpdate(b *testing.B) {
	idx := index.New(0)
	st := New(Config{Index: idx, ACL: acl.New(false, idx)})
	defer st.Close()
	mux := http.NewServeMux()
	mux.Handle("/v1/var/", st.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := testhttp.NomadClient(b, srv.URL, "")
	v, _, err := c.Variables().Create(&api.Variable{Path: "bench/x", Items: api.VariableItems{"k": "v"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		v, _, err = c.Variables().CheckedUpdate(v, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
}
