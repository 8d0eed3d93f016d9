package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

type coded struct{ code int }

func (c coded) Error() string   { return fmt.Sprintf("Unexpected response code: %d", c.code) }
func (c coded) StatusCode() int { return c.code }

func TestTransient(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("reading allocation: %w", cluster.ErrAllocNotFound), false},
		{fmt.Errorf("x: %w", cluster.ErrPermissionDenied), false},
		{fmt.Errorf("x: %w", restart.ErrPlacementFailure), false},
		{errors.New("Unexpected response code: 500 (Task not running)"), false},
		{errors.New("Unexpected response code: 500 (restart of an alloc that should not run)"), false},
		{errors.New("Unexpected response code: 500 (No cluster leader)"), true},
		{errors.New("Unexpected response code: 503 (overloaded)"), true},
		{fmt.Errorf("x: %w", coded{502}), true},
		{fmt.Errorf("x: %w", coded{429}), true},
		{fmt.Errorf("x: %w", coded{400}), false},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{errors.New("something else"), false},
	}
	for _, tc := range cases {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
