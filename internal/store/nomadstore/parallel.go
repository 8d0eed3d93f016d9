package nomadstore

import (
	"context"
	"sync"
)

// chunkWorkers bounds the requests one record's chunks send at once: enough to hide the
// round trips to a remote cluster, few enough not to crowd Nomad's servers.
const chunkWorkers = 4

// forEach runs fn for 0..n-1 on up to workers goroutines and returns the first error; the
// context given to fn ends when one call failed.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
		next     = make(chan int)
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
