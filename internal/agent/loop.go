package agent

import (
	"context"
	"sync"
	"time"
)

// runLoop is the shape of the agent's runners (fleets, schedules): watch signals changed
// after each change of what the runner follows (a blocking query, in its own goroutine);
// each change (onChange first) and each kick make a pass, and pass says how long until the
// next one is due anyway. It returns once ctx ended and watch returned.
func runLoop(ctx context.Context, watch func(ctx context.Context, changed chan<- struct{}), kick <-chan struct{},
	onChange func(ctx context.Context), pass func(ctx context.Context) time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	changed := make(chan struct{}, 1)
	wg.Go(func() { watch(ctx, changed) })
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if onChange != nil {
				onChange(ctx)
			}
		case <-kick:
		case <-timer.C:
		}
		timer.Reset(pass(ctx))
	}
}

// signal wakes whoever waits on ch, unless a wake-up is pending already.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// countWhere counts the values of m for which keep is true.
func countWhere[K comparable, V any](m map[K]V, keep func(V) bool) int {
	n := 0
	for _, v := range m {
		if keep(v) {
			n++
		}
	}
	return n
}
