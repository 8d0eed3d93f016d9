package variables

import (
	"fmt"
	"net/http"

	"github.com/hashicorp/go-bexpr"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// compileFilter compiles a ?filter= expression (go-bexpr, as Nomad uses) over the listed
// metadata; an empty expression keeps everything.
func compileFilter(expr string) (func(metaJSON) (bool, error), error) {
	if expr == "" {
		return func(metaJSON) (bool, error) { return true, nil }, nil
	}
	eval, err := bexpr.CreateEvaluator(expr)
	if err != nil {
		return nil, simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("failed to create result paginator: failed to read filter expression: %v", err))
	}
	return func(m metaJSON) (bool, error) {
		ok, err := eval.Evaluate(m)
		if err != nil {
			return false, simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("failed to read result page: %v", err))
		}
		return ok, nil
	}, nil
}
