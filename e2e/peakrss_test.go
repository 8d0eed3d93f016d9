package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// peakRSS follows a child process's peak resident set (VmHWM in /proc/<pid>/status) until
// ctx ends, and returns a function giving the highest value seen, in KiB.
//
// The child's own figure, not getrusage's: a child started by os/exec shares its parent's
// memory until it execs (Go clones it with CLONE_VM), and Linux carries the parent's
// high-water mark over into the child's ru_maxrss at exec. With a simulated cluster of
// 10,000 allocations in the parent that reported the parent's peak, not the driver's.
// VmHWM belongs to the child's own address space. It is read every 20 ms: a peak in the
// child's last 20 ms of life would be missed.
func peakRSS(ctx context.Context, pid int) func() int64 {
	var peak atomic.Int64
	read := func() {
		if kb, err := vmHWM(pid); err == nil && kb > peak.Load() {
			peak.Store(kb)
		}
	}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 { return peak.Load() }
}

// vmHWM reads a process's peak resident set size, in KiB.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
