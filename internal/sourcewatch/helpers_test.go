package sourcewatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// realTime is the time scale of these tests' clusters: a variable's ModifyTime, on
// nomadsim's clock, is compared with the watches' own clock (a deletion's ChangedAt), so
// Nomad's time runs as real time does.
const realTime = 1

// testGap paces the tests' groups: short, so that a test's steps do not wait on it.
const testGap = 5 * time.Millisecond

// testContext ends with the test, or after a minute: the bound of every wait.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startWriter starts nomadsim and returns it, a client of it that writes the test's
// variables, and the test's context.
func startWriter(t *testing.T) (*nomadsim.Cluster, *api.Client, context.Context) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{TimeScale: realTime})
	return c, simtest.Client(t, c), testContext(t)
}

// hubOn is a Hub on c's Variables with opts, through a client of its own.
func hubOn(t *testing.T, c *nomadsim.Cluster, opts Options) *Hub {
	t.Helper()
	return New(nomadvars.New(simtest.Client(t, c), nomadvars.Options{}), opts)
}

// startTracked is startWriter with a client for the code under test whose requests are
// tracked.
func startTracked(t *testing.T) (*nomadsim.Cluster, *api.Client, *api.Client, *simtest.Inflight, context.Context) {
	t.Helper()
	c, writer, ctx := startWriter(t)
	client, tr := simtest.TrackedClient(t, c, "")
	return c, writer, client, tr, ctx
}

// put writes a variable and returns it as Nomad stored it.
func put(t *testing.T, c *api.Client, path, value string) *api.Variable {
	t.Helper()
	v, _, err := c.Variables().Create(&api.Variable{Namespace: "default", Path: path, Items: map[string]string{"v": value}}, nil)
	if err != nil {
		t.Fatalf("writing variable %s: %v", path, err)
	}
	return v
}

func del(t *testing.T, c *api.Client, path string) {
	t.Helper()
	if _, err := c.Variables().Delete(path, &api.WriteOptions{Namespace: "default"}); err != nil {
		t.Fatalf("deleting variable %s: %v", path, err)
	}
}

func variable(path string) onchange.Source {
	return onchange.Source{Kind: onchange.NomadVariable, Path: path, Namespace: "default", Region: "global"}
}

func prefix(path string) onchange.Source {
	return onchange.Source{Kind: onchange.NomadPrefix, Path: path, Namespace: "default", Region: "global"}
}

// next receives the next State, failing the test when ctx ends or the channel closes.
func next(t *testing.T, ctx context.Context, what string, ch <-chan State) State {
	t.Helper()
	select {
	case st, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the channel closed", what)
		}
		return st
	case <-ctx.Done():
		t.Fatalf("%s: no State came", what)
		return State{}
	}
}

// until receives States until cond holds for one, and returns it.
func until(t *testing.T, ctx context.Context, what string, ch <-chan State, cond func(State) bool) State {
	t.Helper()
	for {
		if st := next(t, ctx, what, ch); cond(st) {
			return st
		}
	}
}

// nomadTime is a variable's ModifyTime as a time.
func nomadTime(v *api.Variable) time.Time { return time.Unix(0, v.ModifyTime) }

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
