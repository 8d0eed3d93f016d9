package notify

import (
	"slices"
)

// Config is what one process notifies: its sinks and their default subscriptions.
type Config struct {
	// Sinks are the names of the sinks this process can send to (-notify).
	Sinks []string
	// On are the default subscriptions (-notify-on); a sink it does not name hears every
	// trigger.
	On Subscriptions
	// Min is the least severity sent (-notify-min).
	Min Severity
	// PageURL is the agent's page, for links ("" : none).
	PageURL string
}

// Notification is one message owed to one sink.
type Notification struct {
	Sink    string
	Seq     uint64
	Trigger Trigger
	Message Message
}

// quietInFleet tells the triggers a fleet's job does not raise on its own: the fleet's
// started and finished say them for all its jobs at once.
func quietInFleet(t Trigger) bool {
	switch t {
	case TriggerStarted, TriggerSucceeded, TriggerConfigChange, TriggerStaleFound:
		return true
	}
	return false
}

// Pending are the notifications s still owes this process's sinks, in order per sink:
// each event after the sink's settled sequence number (its outbox's Through) that raises
// a trigger the sink hears, at -notify-min or above. meta is the job's meta (its
// nomad-restart.notify.* keys subscribe too). An event raising several triggers the sink
// hears makes one notification, of the first.
func (c Config) Pending(s *Subject, meta map[string]string) []Notification {
	var recorded Subscriptions
	var through map[string]uint64
	if s.Outbox != nil {
		recorded, through = FromRecord(s.Outbox.Subscribe), s.Outbox.Through
	}
	metaSubs, _ := FromMeta(meta)
	var out []Notification
	sinks := slices.Clone(c.Sinks)
	slices.Sort(sinks)
	for _, sink := range slices.Compact(sinks) {
		hears := c.hears(sink, recorded, metaSubs)
		for _, ev := range s.Events {
			if ev.Seq == 0 || ev.Seq <= through[sink] {
				continue
			}
			for _, t := range triggersOf(s, ev) {
				if !slices.Contains(hears, t) || severityOf(t, s.Status) < c.Min {
					continue
				}
				if s.Fleet != "" && quietInFleet(t) {
					continue
				}
				out = append(out, Notification{Sink: sink, Seq: ev.Seq, Trigger: t, Message: render(s, ev, t, c.PageURL)})
				break
			}
		}
	}
	return out
}

// hears are the triggers sink hears: the defaults (every trigger when -notify-on does
// not name it), and what the restart and its job's meta subscribe it to.
func (c Config) hears(sink string, recorded, meta Subscriptions) []Trigger {
	out, named := c.On[sink]
	if !named {
		out = Triggers()
	}
	out = slices.Clone(out)
	out = append(out, recorded[sink]...)
	out = append(out, meta[sink]...)
	return out
}
