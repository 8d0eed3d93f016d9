package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// countingFiles is a FileReader that records how many reads overlap, and fails the
// allocations err names.
type countingFiles struct {
	err   func(allocID string) error
	reads simtest.Overlap
}

func (f *countingFiles) FileTimes(_ context.Context, allocID string, paths []string) (map[string]time.Time, error) {
	defer f.reads.Enter()()
	time.Sleep(time.Millisecond) // let the reads overlap
	if f.err != nil {
		if err := f.err(allocID); err != nil {
			return nil, err
		}
	}
	out := map[string]time.Time{}
	for _, p := range paths {
		out[p] = time.Unix(1, 0)
	}
	return out, nil
}

func runningAllocs(n int) []*restart.Alloc {
	var out []*restart.Alloc
	for i := range n {
		out = append(out, &restart.Alloc{ID: fmt.Sprintf("%08d", i), Group: "web", ClientStatus: restart.ClientRunning, DesiredStatus: restart.DesiredRun})
	}
	return out
}

// At most cap(slots) listings are in flight, and every running allocation is read.
func TestReadFileTimesBoundsItsReads(t *testing.T) {
	f := &countingFiles{}
	allocs := runningAllocs(20)
	allocs = append(allocs, &restart.Alloc{ID: "stopped", Group: "web", ClientStatus: "complete", DesiredStatus: "stop"})
	read := ReadFileTimes(context.Background(), f, allocs, map[string][]string{"web": {"main/local/a"}}, make(chan struct{}, 4))
	if len(read.Times) != 20 || len(read.Failed) != 0 || read.Denied {
		t.Fatalf("read %d, failed %v, denied %v; want the 20 running", len(read.Times), read.Failed, read.Denied)
	}
	if top := f.reads.Most(); top > 4 || top < 2 {
		t.Errorf("%d reads in flight at once, want 2 to 4", top)
	}
}

// A gone allocation is left out, another failure is kept with its allocation, and a
// denial stops the reading.
func TestReadFileTimesFailures(t *testing.T) {
	f := &countingFiles{err: func(id string) error {
		switch id {
		case "00000001":
			return fmt.Errorf("listing: %w", ErrAllocNotFound)
		case "00000002":
			return errors.New("connection reset")
		}
		return nil
	}}
	read := ReadFileTimes(context.Background(), f, runningAllocs(4), map[string][]string{"web": {"main/local/a"}}, make(chan struct{}, 1))
	if len(read.Times) != 2 || len(read.Failed) != 1 || read.Failed["00000002"] == nil || read.Denied {
		t.Fatalf("times %v, failed %v, denied %v", read.Times, read.Failed, read.Denied)
	}

	f.err = func(string) error { return fmt.Errorf("listing: %w", ErrPermissionDenied) }
	read = ReadFileTimes(context.Background(), f, runningAllocs(10), map[string][]string{"web": {"main/local/a"}}, make(chan struct{}, 1))
	if !read.Denied || len(read.Times) != 0 || len(read.Failed) != 1 {
		t.Errorf("after a denial: times %v, failed %d, denied %v; want the first refusal only", read.Times, len(read.Failed), read.Denied)
	}
}
