package simtest

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
)

// MainOrChild is the TestMain of tests that re-execute their own binary as the
// nomad-restart command, so that drivers and agents are real processes (SIGKILL and SIGTERM
// are real) without a separate build. In a process whose environment sets childEnv to "1"
// it runs child, with a context that ends at SIGINT or SIGTERM, and exits with its code;
// in any other it runs the tests.
func MainOrChild(m *testing.M, childEnv string, child func(ctx context.Context) int) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := child(ctx)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a command's or a process's
// output, a logger) and a reader (the test).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
