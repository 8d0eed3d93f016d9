package restart

import "fmt"

// eventsDroppedFormat is the text of the marker event that stands for dropped events.
const eventsDroppedFormat = "%d earlier events were dropped to keep the log bounded"

// AppendEvent appends e to the record's log with the next sequence number and returns it as
// stored. Past MaxEvents the oldest events are dropped and one marker event (type warning,
// first in the log) says how many, so readers see that the log has a gap.
func (r *Record) AppendEvent(e Event) Event {
	e.Seq = r.LastSeq() + 1
	r.Events = append(r.Events, e)
	if len(r.Events) <= MaxEvents {
		return e
	}
	// Keep MaxEvents-1 real events plus the marker.
	hasMarker := r.EventsDropped > 0 && len(r.Events) > 0 && r.Events[0].Seq == 0
	real := r.Events
	if hasMarker {
		real = r.Events[1:]
	}
	drop := len(real) - (MaxEvents - 1)
	if drop <= 0 {
		return e
	}
	r.EventsDropped += uint64(drop)
	kept := real[drop:]
	marker := Event{
		Seq:     0, // the marker stands outside the sequence; readers skip Seq 0 when resuming
		Time:    kept[0].Time,
		Type:    EventWarning,
		Message: fmt.Sprintf(eventsDroppedFormat, r.EventsDropped),
	}
	// In place: a driver appends an event per allocation step, and a fresh slice each time
	// would be most of what a big restart allocates.
	n := copy(r.Events[1:], kept)
	r.Events[0] = marker
	r.Events = r.Events[:1+n]
	return e
}

// LastSeq is the sequence number of the newest event (0 when none).
func (r *Record) LastSeq() uint64 {
	for i := len(r.Events) - 1; i >= 0; i-- {
		if r.Events[i].Seq > 0 {
			return r.Events[i].Seq
		}
	}
	return 0
}

// EventsAfter returns the events with a sequence number above seq, oldest first.
func (r *Record) EventsAfter(seq uint64) []Event {
	var out []Event
	for _, e := range r.Events {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}
