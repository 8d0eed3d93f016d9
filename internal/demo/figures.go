package demo

import (
	"math"
	"time"
)

// Figures is what a restart did to the service, as `demo -json` prints it.
type Figures struct {
	// MinServing is the fewest instances that served at once.
	MinServing int `json:"min_serving"`
	// NoneServingShare is the share of the time, 0 to 1, during which no instance served.
	NoneServingShare float64 `json:"none_serving_share"`
	// Seconds is the total time, from the restart's start until it ended and every
	// instance served again (on the cluster's clock).
	Seconds float64 `json:"seconds"`
	// RestartSeconds is how long the restart itself ran: Nomad's command ends before its
	// instances serve again.
	RestartSeconds float64 `json:"restart_seconds"`
	// Requests is how many requests a load balancer in front of the service sent, from
	// just before the restart until every instance answered it again; FailedRequests how
	// many of them failed (refused, timed out, answered other than 2xx, or with no
	// instance listed to send them to).
	Requests       int `json:"requests"`
	FailedRequests int `json:"failed_requests"`
	// RestartID is the restart's record.
	RestartID string `json:"restart_id,omitempty"`
}

// figuresOf sums up samples taken from a restart's start (the first) until every instance
// served again (the last), the restart having ended at ended. Each sample holds until the
// next: the share of time with none serving is weighted by time, not by sample count.
func figuresOf(samples []servingSample, ended time.Time) Figures {
	if len(samples) == 0 {
		return Figures{}
	}
	start, last := samples[0].at, samples[len(samples)-1].at
	f := Figures{MinServing: samples[0].serving}
	var none time.Duration
	for i, s := range samples {
		f.MinServing = min(f.MinServing, s.serving)
		if i+1 < len(samples) && s.serving == 0 {
			none += samples[i+1].at.Sub(s.at)
		}
	}
	total := last.Sub(start)
	if total > 0 {
		f.NoneServingShare = round(float64(none)/float64(total), 1000)
	}
	f.Seconds = round(total.Seconds(), 10)
	f.RestartSeconds = round(max(ended.Sub(start), 0).Seconds(), 10)
	return f
}

// round rounds x to 1/per (per 10: tenths).
func round(x, per float64) float64 { return math.Round(x*per) / per }
