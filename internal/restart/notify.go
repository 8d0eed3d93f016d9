package restart

import "time"

// Notifications is a record's outbox: the subscriptions it was filed with and, per sink,
// how far the notifications its events call for were settled. The process that holds the
// record's lease (its driver, or an adopter after a crash) sends what lies past a sink's
// Through and then moves it on with check-and-set, so that neither a crash nor an
// adoption loses or repeats one: a notification's key is the record's ID and its event's
// sequence number. Only the notifying process writes it; a driver adopts a newer stored
// copy as it adopts operators' Control.
type Notifications struct {
	// Subscribe maps a trigger to the sinks that hear it, as the restart was filed with
	// (`run -notify-on`); the agent's defaults and the job's meta add to it when sending.
	Subscribe map[string][]string `json:",omitempty"`
	// Through is, per sink name, the sequence number of the newest event whose
	// notification to that sink was settled (sent, given up, or folded into a summary).
	Through map[string]uint64 `json:",omitempty"`
	// Sent and Failed count the notifications delivered and given up, over the record's life.
	Sent   int `json:",omitempty"`
	Failed int `json:",omitempty"`
	// Log holds the latest settled notifications, oldest first (MaxNotificationLog).
	Log []Delivery `json:",omitempty"`
}

// MaxNotificationLog bounds Notifications.Log.
const MaxNotificationLog = 20

// Delivery outcomes.
const (
	DeliverySent       = "sent"
	DeliveryFailed     = "failed"     // retried for the bounded time, then given up
	DeliverySummarized = "summarized" // held by the sink's rate limit and sent in a summary
)

// Delivery is one settled notification.
type Delivery struct {
	Sink    string
	Seq     uint64
	Trigger string
	Outcome string
	Time    time.Time
	// Error says why a failed delivery was given up (never the sink's URL).
	Error string `json:",omitempty"`
}

// Settle records that the notification of event seq to sink ended with d's outcome, and
// moves the sink's Through on.
func (n *Notifications) Settle(d Delivery) {
	if n.Through == nil {
		n.Through = map[string]uint64{}
	}
	if d.Seq > n.Through[d.Sink] {
		n.Through[d.Sink] = d.Seq
	}
	switch d.Outcome {
	case DeliverySent, DeliverySummarized:
		n.Sent++
	case DeliveryFailed:
		n.Failed++
	}
	n.Log = append(n.Log, d)
	if len(n.Log) > MaxNotificationLog {
		n.Log = append(n.Log[:0], n.Log[len(n.Log)-MaxNotificationLog:]...)
	}
}

// Clone is a deep copy (nil for nil).
func (n *Notifications) Clone() *Notifications {
	if n == nil {
		return nil
	}
	c := *n
	if n.Subscribe != nil {
		c.Subscribe = make(map[string][]string, len(n.Subscribe))
		for k, v := range n.Subscribe {
			c.Subscribe[k] = append([]string(nil), v...)
		}
	}
	if n.Through != nil {
		c.Through = make(map[string]uint64, len(n.Through))
		for k, v := range n.Through {
			c.Through[k] = v
		}
	}
	c.Log = append([]Delivery(nil), n.Log...)
	return &c
}
