package cluster

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestWatchPlacementFailureRecorded(t *testing.T) {
	n, rec := replayNomad(t, "33-job-evaluations-blocked")
	pf, err := n.WatchPlacementFailure(context.Background(), "default", "impossible", "g", 50)
	if err != nil {
		t.Fatal(err)
	}
	if pf.EvalID != "28cd6859-ffe0-b184-f05e-85cd0cf545b1" || pf.Group != "g" {
		t.Fatalf("got %+v", pf)
	}
	want := []string{`Constraint "${attr.kernel.name} = plan9": 1 nodes excluded by filter`}
	if !slices.Equal(pf.Reasons, want) {
		t.Fatalf("reasons %q, want %q", pf.Reasons, want)
	}
	wantErr := "Evaluation \"28cd6859-ffe0-b184-f05e-85cd0cf545b1\" has placement failures for group \"g\":\n" +
		"    * Constraint \"${attr.kernel.name} = plan9\": 1 nodes excluded by filter"
	if pf.Error() != wantErr {
		t.Fatalf("Error()\n got %q\nwant %q", pf.Error(), wantErr)
	}
	if q := rec.seen()[0].URL.Query(); q.Get("index") != "50" {
		t.Fatalf("blocking query not from the stop's index: %v", q)
	}
}

func TestWatchPlacementFailureIgnoresOlderAndOtherGroups(t *testing.T) {
	var evals []*api.Evaluation
	loadExchange(t, "33-job-evaluations-blocked").decodeBody(t, &evals)
	late := *evals[0]
	late.ID = "late"
	late.CreateIndex = 70
	var calls atomic.Int32
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			jsonAt(w, 61, evals) // the blocked eval at 53 predates the stop at 60
			return
		}
		jsonAt(w, 70, append([]*api.Evaluation{&late}, evals...))
	})
	pf, err := n.WatchPlacementFailure(context.Background(), "default", "impossible", "g", 60)
	if err != nil || pf.EvalID != "late" {
		t.Fatalf("got %+v, %v", pf, err)
	}
	reqs := rec.seen()
	if len(reqs) != 3 || reqs[0].URL.Query().Get("index") != "60" || reqs[1].URL.Query().Get("index") != "61" {
		t.Fatalf("want 3 blocking reads, from 60 then 61: %v", reqs)
	}

	// Group "other" never fails: the watch runs until the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := n.WatchPlacementFailure(ctx, "default", "impossible", "other", 60); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's end, got %v", err)
	}
}

func TestPlacementReasons(t *testing.T) {
	m := &api.AllocationMetric{
		NodesEvaluated:     0,
		NodesAvailable:     map[string]int{"dc2": 0, "dc1": 3},
		ClassFiltered:      map[string]int{"gpu": 2},
		ConstraintFiltered: map[string]int{"missing drivers": 1, "${node.class} = x": 4},
		NodesExhausted:     2,
		ClassExhausted:     map[string]int{"small": 2},
		DimensionExhausted: map[string]int{"memory": 2, "cpu": 1},
		QuotaExhausted:     []string{"memory exhausted (2048 > 1024)"},
	}
	want := []string{
		"No nodes were eligible for evaluation",
		`No nodes are available in datacenter "dc2"`,
		`Class "gpu": 2 nodes excluded by filter`,
		`Constraint "${node.class} = x": 4 nodes excluded by filter`,
		`Constraint "missing drivers": 1 nodes excluded by filter`,
		"Resources exhausted on 2 nodes",
		`Class "small" exhausted on 2 nodes`,
		`Dimension "cpu" exhausted on 1 nodes`,
		`Dimension "memory" exhausted on 2 nodes`,
		`Quota limit hit "memory exhausted (2048 > 1024)"`,
	}
	if got := PlacementReasons(m); !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if PlacementReasons(nil) != nil {
		t.Fatal("reasons for no metrics")
	}
}
