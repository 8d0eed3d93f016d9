package engine

import (
	"context"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// wallClock is the metric gates' time (gate.Clock): the wall clock, paused with the one
// pause that ends with its context.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) bool { return cluster.Sleep(ctx, d) }
