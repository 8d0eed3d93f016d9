package demo

import (
	"context"
	"fmt"
	"time"
)

// loadBalancer is a load balancer in front of the demo's service that counts the requests
// its clients would see fail (nomadsim/traffic's: see balancer). Start and stop once each.
type loadBalancer interface {
	// Start reads the catalog once and starts sending requests.
	Start(ctx context.Context) error
	// Answering reports whether it lists n instances and each answers now.
	Answering(n int) bool
	// Reset starts the counts over.
	Reset()
	// stop ends the traffic and returns what it counted since Reset.
	stop() requestCounts
}

// requestCounts is what a load balancer counted during one restart.
type requestCounts struct {
	requests, failed int
}

// requestEvery is how often the load balancer sends a request: every 10 ms of the
// simulation's clock, as the tests' balancer does, and no more than 200 times a real
// second (-time-scale 10 would otherwise send 1,000), so that the traffic does not load
// the machine that runs the restarts it measures: it shares the machine's cores with the
// simulated cluster and the restarts' driver, whose pace the other figures measure.
func requestEvery(scale float64) time.Duration {
	return max(10*time.Millisecond, time.Duration(float64(5*time.Millisecond)*scale))
}

// answeringWithin bounds, in real time, the wait for the load balancer to see every
// instance answer: before a restart they already serve, and after it they have passed
// their checks, so only the balancer's next refresh (a simulated second) is left.
const answeringWithin = time.Minute

// pollEvery is how often the wait asks whether every instance answers: each ask sends
// a request to every instance, beside the balancer's own traffic.
const pollEvery = 50 * time.Millisecond

// startCounting starts lb and, once every one of count instances answers through it,
// starts its counts over: what a restart costs the service's clients is counted from
// just before the restart.
func startCounting(ctx context.Context, lb loadBalancer, count int) error {
	if err := lb.Start(ctx); err != nil {
		return fmt.Errorf("starting the load balancer: %w", err)
	}
	if err := waitAnswering(ctx, lb, count); err != nil {
		lb.stop()
		return err
	}
	lb.Reset()
	return nil
}

// stopCounting waits until every one of count instances answers through lb again, then
// stops it and returns its counts. The probe's figures end once the instances pass their
// checks; the balancer's end once its clients are served again, which with Nomad's
// provider is when the balancer next reads the catalog.
func stopCounting(ctx context.Context, lb loadBalancer, count int) (requestCounts, error) {
	err := waitAnswering(ctx, lb, count)
	counts := lb.stop()
	if err != nil {
		return requestCounts{}, err
	}
	return counts, nil
}

// waitAnswering waits until lb lists count instances and each answers, within
// answeringWithin.
func waitAnswering(ctx context.Context, lb loadBalancer, count int) error {
	wctx, cancel := context.WithTimeout(ctx, answeringWithin)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !lb.Answering(count) {
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("the load balancer did not see all %d instances answer within %s", count, answeringWithin)
		case <-tick.C:
		}
	}
	return nil
}
