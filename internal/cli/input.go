package cli

import (
	"bufio"
	"context"
)

// inputLines starts, once, a reader of stdin lines. The channel is closed at end of input.
// The reader goroutine may outlive the command while it waits on a terminal; that is the
// cost of a prompt that a detach (Ctrl-C) or an answer from elsewhere must be able to abandon.
func (a *app) inputLines() <-chan string {
	if a.lines != nil {
		return a.lines
	}
	ch := make(chan string)
	a.lines = ch
	if a.stdin == nil {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(a.stdin)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// readLine reads one line of input; ok is false at end of input or when ctx ends.
func (a *app) readLine(ctx context.Context) (line string, ok bool) {
	select {
	case line, ok = <-a.inputLines():
		return line, ok
	case <-ctx.Done():
		return "", false
	}
}
