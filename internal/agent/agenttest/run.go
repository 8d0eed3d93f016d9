package agenttest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Runner is what Run runs: an agent (internal/agent's *Agent).
type Runner interface {
	Run(ctx context.Context) error
	Holder() string
}

// Run runs a in the background; the returned stop cancels it and waits for Run to return
// (the streams of its page end then), reporting an error it returned. The test's end
// stops it too.
func Run(t testing.TB, a Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent %s: Run: %v", a.Holder(), err)
			}
		case <-time.After(Timeout):
			t.Errorf("agent %s did not stop", a.Holder())
		}
	})
	t.Cleanup(stop)
	return stop
}
