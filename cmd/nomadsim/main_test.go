package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of run and reads of the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesUntilCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-consul-addr", "127.0.0.1:0", "-nodes", "1", "-dcs", "dc1"}, &out, io.Discard)
	}()
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" && time.Now().Before(deadline) {
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "export NOMAD_ADDR="); ok {
				addr = v
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("no address printed: %q", out.String())
	}
	resp, err := http.Get(addr + "/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("nodes: %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-nodes", "0"}, {"-time-scale", "-1"}, {"-nosuch"}} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestHelpExitsZero: -help and -h print the usage on stdout and end without error (exit 0);
// a flag that does not exist is an error, with the usage on stderr.
func TestHelpExitsZero(t *testing.T) {
	for _, arg := range []string{"-help", "-h", "--help"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{arg}, &out, &errOut); err != nil {
			t.Errorf("%s: %v, want no error (exit 0)", arg, err)
		}
		if !strings.HasPrefix(out.String(), "Usage of nomadsim:") || !strings.Contains(out.String(), "-time-scale") || errOut.Len() != 0 {
			t.Errorf("%s: stdout %q, stderr %q; want the usage on stdout", arg, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-nosuch"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -nosuch") {
		t.Errorf("-nosuch: error %v, want the flag's", err)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), "-time-scale") {
		t.Errorf("-nosuch: stdout %q, stderr %q; want the usage on stderr", out.String(), errOut.String())
	}
}
