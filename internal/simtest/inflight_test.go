package simtest

import (
	"io"
	"net/http"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// An Inflight counts a blocking query as open until its body is closed, listings and plain
// reads apart; a SetFail answer is counted as a listing but never reaches Nomad; Reset
// keeps what is open.
func TestInflightCounts(t *testing.T) {
	c := Start(t, nomadsim.Options{})
	client, tr := TrackedClient(t, c, "")
	if _, _, err := client.Variables().Create(&api.Variable{Path: "a", Items: map[string]string{"k": "v"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Variables().Read("a", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Variables().PrefixList("", nil); err != nil {
		t.Fatal(err)
	}
	// A blocking listing, held open by hand: Nomad answers it at once (the index is old),
	// and it counts as open until its body is closed.
	req, err := http.NewRequest(http.MethodGet, c.Addr()+"/v1/vars?index=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Counts(); got != (InflightCounts{Blocking: 1, Peak: 1, Lists: 2, Reads: 1}) {
		t.Errorf("with a blocking listing open: %+v, want 1 open, 2 listings and 1 read", got)
	}
	tr.Reset()
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	_ = resp.Body.Close() // a second Close does not count the query closed twice
	if got := tr.Counts(); got != (InflightCounts{Peak: 1}) {
		t.Errorf("after Reset and the body's Close: %+v, want the peak kept from what was open", got)
	}

	tr.SetFail(func(r *http.Request) *http.Response { return StatusAnswer(r, http.StatusServiceUnavailable) })
	if _, _, err := client.Variables().PrefixList("", nil); err == nil {
		t.Error("a listing answered 503 by SetFail's function succeeded")
	}
	tr.SetFail(nil)
	if _, _, err := client.Variables().PrefixList("", nil); err != nil {
		t.Errorf("a listing after SetFail(nil): %v", err)
	}
	if got := tr.Counts(); got != (InflightCounts{Peak: 1, Lists: 2}) {
		t.Errorf("after a failed and a passed listing: %+v", got)
	}
}
