package cluster

import (
	"net/http"
	"time"
)

// Nomad's answers carry the time they were written in their Date header (Go's HTTP server
// adds it, to the second, on Nomad's clock). The health gate judges on Nomad's clock; before
// a restart has seen fresh timestamps of Nomad's (a task's events), an estimate anchored on
// the newest timestamp it read (an allocation's start, minutes old, say) runs as far behind,
// which made the availability budget take an allocation restarted then for one restarted
// just now. The Date of every answer keeps the estimate within a second of Nomad's clock.

// dateTransport hands the Date of each answer to observe.
type dateTransport struct {
	next    http.RoundTripper
	observe func(time.Time)
}

// ObserveDates wraps next so that observe hears the Date header of every answer (Nomad's
// clock, truncated to the second); answers without a valid one are passed on unheard.
func ObserveDates(next http.RoundTripper, observe func(time.Time)) http.RoundTripper {
	if observe == nil {
		return next
	}
	return &dateTransport{next: next, observe: observe}
}

func (t *dateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			t.observe(d)
		}
	}
	return resp, err
}
