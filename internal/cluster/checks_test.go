package cluster

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestAllocChecksRecorded(t *testing.T) {
	n, rec := replayNomad(t, "49-allocation-checks")
	got, err := n.AllocChecks(context.Background(), "420beacf-6468-9f8a-46e0-e89720c8e6d1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d checks", len(got))
	}
	c := got[0]
	want := CheckResult{
		ID:   "1f648be662684b0c28c2af518de9b88b7ec80787a86f7630f507abead607e60d",
		Name: `service: "web" check`, Group: "web.web[0]", Service: "web", Mode: "healthiness",
		Status: "success", StatusCode: 200, Output: "nomad: http ok", Time: time.Unix(1796008707, 0).UTC(),
	}
	if c != want {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if p := rec.seen()[0].URL.Path; p != "/v1/client/allocation/420beacf-6468-9f8a-46e0-e89720c8e6d1/checks" {
		t.Fatalf("asked %s", p)
	}
}

func TestAllocChecksUnknownAllocation(t *testing.T) {
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, 404, "alloc not found") })
	if _, err := n.AllocChecks(context.Background(), "nosuch"); !errors.Is(err, ErrAllocNotFound) {
		t.Fatalf("got %v", err)
	}
}
