package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// step is one scripted answer of a watch's query: the index it returns or its error,
// after blocking for took (a blocking query's wait).
type step struct {
	next uint64
	err  error
	took time.Duration
}

// call is one call of a scripted query: the index it was asked to wait on, and when (since
// the start of the run, on the bubble's clock).
type call struct {
	index uint64
	at    time.Duration
}

var errBoom = errors.New("boom")

// script runs w with a query that answers steps in order, then ends ctx at the next call,
// and returns every call (len(steps)+1: the last shows the index after the last step).
// Call it inside a synctest bubble, so that backoffs and gaps take no real time.
func script(w *Watch, steps []step) []call {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var calls []call
	w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
		calls = append(calls, call{index, time.Since(start)})
		if len(calls) > len(steps) {
			cancel()
			return 0, ctx.Err()
		}
		s := steps[len(calls)-1]
		if !Sleep(ctx, s.took) {
			return 0, ctx.Err()
		}
		return s.next, s.err
	})
	return calls
}

func indexes(calls []call) []uint64 {
	out := make([]uint64, len(calls))
	for i, c := range calls {
		out[i] = c.index
	}
	return out
}

func TestWatchIndex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		want  []uint64 // the index each call waits on
	}{
		{"starts at 0, then waits on each answer's index",
			[]step{{next: 5}, {next: 7}, {next: 7}, {next: 9}}, []uint64{0, 5, 7, 7, 9}},
		{"an index going backwards starts over from 0",
			[]step{{next: 10}, {next: 3}, {next: 4}}, []uint64{0, 10, 0, 4}},
		{"an index equal to the last one holds",
			[]step{{next: 10}, {next: 10}}, []uint64{0, 10, 10}},
		{"an answer at 0 is taken as 1, which blocks",
			[]step{{next: 0}, {next: 0}, {next: 6}}, []uint64{0, 1, 1, 6}},
		{"an answer at 0 after a higher index is taken as 1 too",
			[]step{{next: 10}, {next: 0}}, []uint64{0, 10, 1}},
		{"a failure starts over from 0",
			[]step{{next: 10}, {err: errBoom}, {next: 12}}, []uint64{0, 10, 0, 12}},
		{"failures in a row wait on 0 until an answer",
			[]step{{next: 10}, {err: errBoom}, {err: errBoom}, {next: 8}, {next: 9}}, []uint64{0, 10, 0, 0, 8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := indexes(script(&Watch{Policy: RetryPolicy{Initial: time.Second, Max: time.Second}}, tc.steps))
				if !slices.Equal(got, tc.want) {
					t.Errorf("the query waited on %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// After failures the watch backs off, capped exponentially with jitter; an answer resets
// the backoff, and the policy's MaxElapsed does not end a watch.
func TestWatchBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy := RetryPolicy{Initial: time.Second, Max: 4 * time.Second, MaxElapsed: 3 * time.Second}
		steps := []step{
			{err: errBoom}, {err: errBoom}, {err: errBoom}, {err: errBoom}, {err: errBoom},
			{next: 1}, {err: errBoom}, {next: 2},
		}
		calls := script(&Watch{Policy: policy}, steps)
		// The wait before each call, from the one before it: equal jitter, so between
		// half the backoff and the backoff.
		for i, want := range []struct{ lo, hi time.Duration }{
			{500 * time.Millisecond, time.Second}, // 1st failure
			{time.Second, 2 * time.Second},        // 2nd
			{2 * time.Second, 4 * time.Second},    // 3rd
			{2 * time.Second, 4 * time.Second},    // 4th: capped at Max
			{2 * time.Second, 4 * time.Second},    // 5th: past MaxElapsed, still trying
			{0, 0},                                // an answer: no wait
			{500 * time.Millisecond, time.Second}, // the backoff starts over
			{0, 0},                                // an answer
		} {
			if d := calls[i+1].at - calls[i].at; d < want.lo || d > want.hi {
				t.Errorf("call %d came %v after call %d, want %v to %v", i+1, d, i, want.lo, want.hi)
			}
		}
	})
}

// MinGap spaces the starts of two queries: a query that answers at once waits for the gap,
// one that blocked longer than the gap is sent again at once.
func TestWatchMinGap(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  time.Duration
		took time.Duration // how long each query blocks
		want time.Duration // from one call to the next
	}{
		{"no gap", 0, 0, 0},
		{"answers at once", time.Second, 0, time.Second},
		{"answers within the gap", time.Second, 300 * time.Millisecond, time.Second},
		{"blocked longer than the gap", time.Second, 3 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				steps := []step{{next: 1, took: tc.took}, {next: 2, took: tc.took}, {next: 3, took: tc.took}}
				calls := script(&Watch{MinGap: tc.gap}, steps)
				for i := 1; i < len(calls); i++ {
					if d := calls[i].at - calls[i-1].at; d != tc.want {
						t.Errorf("call %d came %v after call %d, want %v", i, d, i-1, tc.want)
					}
				}
			})
		})
	}
}

// logRecorder is a slog.Handler that keeps what it is given, one line per record.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, b.String())
	return nil
}

func (r *logRecorder) text() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// A streak of failures logs one Warn, with the error, at its first failure and one Info
// when the watch works again; an error that comes as ctx ends is no failure.
func TestWatchLogsOncePerStreak(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		want  []string
	}{
		{"no failure, no log", []step{{next: 1}, {next: 2}}, nil},
		{"one streak", []step{{next: 1}, {err: errBoom}, {err: errBoom}, {err: errBoom}, {next: 2}, {next: 3}}, []string{
			"WARN listing things failed; retrying err=boom",
			"INFO listing things works again failed_for=",
		}},
		{"two streaks", []step{{err: errBoom}, {next: 1}, {err: errors.New("bang")}, {err: errBoom}, {next: 2}}, []string{
			"WARN listing things failed; retrying err=boom",
			"INFO listing things works again failed_for=",
			"WARN listing things failed; retrying err=bang",
			"INFO listing things works again failed_for=",
		}},
		{"a streak the watch's end cuts", []step{{err: errBoom}, {err: errBoom}}, []string{
			"WARN listing things failed; retrying err=boom",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &logRecorder{}
				// script's last call fails as ctx ends: it must not count.
				script(&Watch{What: "listing things", Log: slog.New(rec), Policy: RetryPolicy{Initial: time.Second}}, tc.steps)
				got := rec.text()
				if len(got) != len(tc.want) {
					t.Fatalf("logged %q, want %q", got, tc.want)
				}
				for i := range got {
					if !strings.HasPrefix(got[i], tc.want[i]) {
						t.Errorf("line %d is %q, want it to start with %q", i, got[i], tc.want[i])
					}
				}
			})
		})
	}
}

// Run returns at once when ctx ends, whatever it waits for: a backoff, the gap, the query.
func TestWatchEndsWithContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Watch
		step step
	}{
		{"during a backoff", Watch{Policy: RetryPolicy{Initial: time.Hour, Max: time.Hour}}, step{err: errBoom}},
		{"during the gap", Watch{MinGap: time.Hour}, step{next: 1}},
		{"during the query", Watch{}, step{next: 1, took: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				calls := 0
				go func() {
					defer close(done)
					tc.w.Run(ctx, func(ctx context.Context, index uint64) (uint64, error) {
						calls++
						if calls > 1 {
							t.Errorf("query called %d times, want once", calls)
							<-ctx.Done()
						}
						if !Sleep(ctx, tc.step.took) {
							return 0, ctx.Err()
						}
						return tc.step.next, tc.step.err
					})
				}()
				time.Sleep(time.Minute) // well into the wait
				synctest.Wait()
				select {
				case <-done:
					t.Fatal("Run returned before ctx ended")
				default:
				}
				start := time.Now()
				cancel()
				<-done
				if d := time.Since(start); d != 0 {
					t.Errorf("Run returned %v after ctx ended, want at once", d)
				}
			})
		})
	}
}

// A Watch run again resumes where it was: its index, its pace, its failure streak.
func TestWatchResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &logRecorder{}
		w := &Watch{What: "listing things", Log: slog.New(rec), MinGap: time.Second, Policy: RetryPolicy{Initial: time.Second}}
		first := script(w, []step{{next: 7}, {err: errBoom}, {next: 9}, {err: errBoom}})
		second := script(w, []step{{err: errBoom}, {next: 11}})
		if got := indexes(first); !slices.Equal(got, []uint64{0, 7, 0, 9, 0}) {
			t.Fatalf("the first run waited on %v", got)
		}
		// The first run ended during its query at 0, after a failure: the second waits
		// on 0 too, once the gap since that query's start passed.
		if got := indexes(second); !slices.Equal(got, []uint64{0, 0, 11}) {
			t.Errorf("the second run waited on %v, want [0 0 11]", got)
		}
		if second[0].at != time.Second {
			t.Errorf("the second run's first query came %v after it started, want the gap (1s) after the first run's last", second[0].at)
		}
		// Two streaks, the second spanning both runs: logged once.
		if got := rec.text(); len(got) != 4 || !strings.HasPrefix(got[2], "WARN") || !strings.HasPrefix(got[3], "INFO") {
			t.Errorf("logged %q, want a Warn and an Info per streak", got)
		}

		again := script(w, nil)
		if got := indexes(again); !slices.Equal(got, []uint64{11}) {
			t.Errorf("a third run waited on %v, want [11]: the index of the last answer", got)
		}
	})
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		live := context.Background()
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		for _, tc := range []struct {
			name string
			ctx  context.Context
			d    time.Duration
			want bool
		}{
			{"zero, live", live, 0, true},
			{"negative, live", live, -time.Second, true},
			{"zero, ended", ended, 0, false},
			{"a second, live", live, time.Second, true},
			{"a second, ended", ended, time.Second, false},
		} {
			start := time.Now()
			if got := Sleep(tc.ctx, tc.d); got != tc.want {
				t.Errorf("%s: Sleep = %v, want %v", tc.name, got, tc.want)
			}
			if want := max(tc.d, 0); tc.want && time.Since(start) != want {
				t.Errorf("%s: slept %v, want %v", tc.name, time.Since(start), want)
			}
		}

		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		start := time.Now()
		if Sleep(ctx, time.Hour) {
			t.Error("Sleep reported a live ctx after it ended")
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Sleep returned %v after it started, want when ctx ended (1s)", d)
		}
	})
}
