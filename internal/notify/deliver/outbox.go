package deliver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/notify"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Defaults of Config.
const (
	// DefaultRetryFor bounds how long one notification is sent again before it is given up.
	DefaultRetryFor = time.Minute
	// DefaultTimeout bounds one attempt (a sink that hangs).
	DefaultTimeout = 10 * time.Second
)

// Config wires an Outbox.
type Config struct {
	// Notify is what this process notifies (its sinks' names, default subscriptions,
	// -notify-min, the page's address).
	Notify notify.Config
	// Sinks are the sinks by name (the names of Notify.Sinks).
	Sinks map[string]Sink
	// Restarts and Fleets keep the records (Fleets nil: no fleet notifications).
	Restarts store.Store
	Fleets   store.Fleets
	// JobMeta reads a job's meta, for its nomad-restart.notify.* subscriptions (nil: none).
	JobMeta func(ctx context.Context, namespace, job string) (map[string]string, error)
	// RetryFor bounds the retries of one notification (0: DefaultRetryFor); Backoff is the
	// first wait between tries (0: half a second).
	RetryFor time.Duration
	Backoff  time.Duration
	// Burst messages per Window per sink (0: notify's defaults); beyond, one summary.
	Burst  int
	Window time.Duration
	// Observe hears each settled notification (the agent's metric); nil: nothing.
	Observe func(sink, outcome string)
	// Note appends a warning to the log of a restart this process drives now (the engine's
	// Note), for a notification given up; false (or nil) when none does: the warning then
	// goes into the record itself if the restart has ended (no driver writes it any more).
	Note   func(ctx context.Context, namespace, id string, ev restart.Event) bool
	Logger *slog.Logger
	Now    func() time.Time
}

// Outbox sends what records owe this process's sinks. The driver of a record (the
// process that holds its lease) tells it when events were stored (Stored); it reads the
// record, sends what is pending past each sink's settled mark in the record, and moves
// the mark on with check-and-set. Nothing of it runs on a restart's path: Stored returns
// at once, and each sink has a goroutine of its own, so a sink that fails or hangs delays
// only its own messages.
type Outbox struct {
	cfg Config
	log *slog.Logger
	ctx context.Context

	mu      sync.Mutex
	workers map[string]*sinkWorker
	scans   map[recordKey]bool // a scan runs; true: another is asked for after it
	// settled is, per record and sink, the newest sequence number settled here: a scan
	// that read the record before a settle's write does not queue it again.
	settled map[sinkKey]uint64
	queued  map[queueKey]bool
	busy    int // scans running and notifications queued or in flight
	meta    map[recordKey]map[string]string
}

type recordKey struct {
	kind steer.Kind
	ns   string
	id   string
}

// sinkKey is one record's notifications to one sink.
type sinkKey struct {
	rec  recordKey
	sink string
}

func (k recordKey) sinkKey(sink string) sinkKey { return sinkKey{k, sink} }

// queueKey is one notification: an event of a record, to one sink.
type queueKey struct {
	sinkKey
	seq uint64
}

// item is one notification queued for a sink.
type item struct {
	rec recordKey
	n   notify.Notification
}

// New starts an outbox whose goroutines live as long as ctx.
func New(ctx context.Context, cfg Config) *Outbox {
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o := &Outbox{cfg: cfg, log: log, ctx: ctx, workers: map[string]*sinkWorker{}, scans: map[recordKey]bool{},
		settled: map[sinkKey]uint64{}, queued: map[queueKey]bool{}, meta: map[recordKey]map[string]string{}}
	for _, name := range cfg.Notify.Sinks {
		w := &sinkWorker{o: o, name: name, sink: cfg.Sinks[name], wake: make(chan struct{}, 1),
			hurry: make(chan struct{}, 1), limit: notify.NewLimiter(cfg.Burst, cfg.Window)}
		o.workers[name] = w
		go w.run(ctx)
	}
	return o
}

// Stored is the engine's hook: a driver stored events of restart id. It returns at once.
func (o *Outbox) Stored(namespace, id string, events []restart.Event) {
	if o == nil || len(o.workers) == 0 || len(events) == 0 {
		return
	}
	o.Kick(steer.KindRestart, namespace, id)
}

// StoredFleet is the fleet driver's hook, as Stored.
func (o *Outbox) StoredFleet(namespace, id string) {
	if o == nil || len(o.workers) == 0 || o.cfg.Fleets == nil {
		return
	}
	o.Kick(steer.KindFleet, namespace, id)
}

// Kick looks at a record for notifications it owes, in the background.
func (o *Outbox) Kick(kind steer.Kind, namespace, id string) {
	k := recordKey{kind, namespace, id}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, running := o.scans[k]; running {
		o.scans[k] = true
		return
	}
	o.scans[k] = false
	o.busy++
	go o.scan(k)
}

// scan reads the record and queues what it owes, again while kicks came meanwhile.
func (o *Outbox) scan(k recordKey) {
	for {
		if err := o.queuePending(k); err != nil && o.ctx.Err() == nil {
			o.log.Warn("reading a record for its notifications", "kind", k.kind, "id", k.id, "err", err)
		}
		o.mu.Lock()
		again := o.scans[k]
		if !again || o.ctx.Err() != nil {
			delete(o.scans, k)
			o.busy--
			o.mu.Unlock()
			return
		}
		o.scans[k] = false
		o.mu.Unlock()
	}
}

func (o *Outbox) queuePending(k recordKey) error {
	subj, jobID, err := o.read(k)
	if err != nil {
		return err
	}
	meta := o.jobMeta(k, jobID)
	pending := o.cfg.Notify.Pending(subj, meta)
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(pending) == 0 && subj.Status.Terminal() {
		// Ended, and its record owes nothing: forget it (a long-running agent sees many).
		delete(o.meta, k)
		for name := range o.workers {
			delete(o.settled, k.sinkKey(name))
		}
		return nil
	}
	for _, n := range pending {
		sk := k.sinkKey(n.Sink)
		qk := queueKey{sk, n.Seq}
		if n.Seq <= o.settled[sk] || o.queued[qk] {
			continue
		}
		o.queued[qk] = true
		o.busy++
		o.workers[n.Sink].push(item{rec: k, n: n})
	}
	return nil
}

// jobMeta is the job's meta, read once per record (nil when unknown).
func (o *Outbox) jobMeta(k recordKey, jobID string) map[string]string {
	if o.cfg.JobMeta == nil || jobID == "" {
		return nil
	}
	o.mu.Lock()
	m, ok := o.meta[k]
	o.mu.Unlock()
	if ok {
		return m
	}
	m, err := o.cfg.JobMeta(o.ctx, k.ns, jobID)
	if err != nil {
		o.log.Debug("reading the job's meta for its notification subscriptions", "job", jobID, "err", err)
		return nil // not cached: the next scan tries again
	}
	o.warnMeta(jobID, m)
	o.mu.Lock()
	o.meta[k] = m
	o.mu.Unlock()
	return m
}

// warnMeta logs, once per record, what in a job's nomad-restart.notify.* meta subscribes
// no one: a key naming no trigger, a sink this process does not have. Otherwise a typo
// in a job file silently leaves its team unnotified.
func (o *Outbox) warnMeta(jobID string, meta map[string]string) {
	subs, problems := notify.FromMeta(meta)
	for name := range subs {
		if !slices.Contains(o.cfg.Notify.Sinks, name) {
			problems = append(problems, fmt.Sprintf("sink %q is not one of this process's (-notify %s)", name, strings.Join(o.cfg.Notify.Sinks, ", ")))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		o.log.Warn("the job's notification meta subscribes no one: fix it in the job's meta", "job", jobID, "problems", strings.Join(problems, "; "))
	}
}

func (o *Outbox) read(k recordKey) (*notify.Subject, string, error) {
	switch k.kind {
	case steer.KindFleet:
		r, err := o.cfg.Fleets.Get(o.ctx, k.ns, k.id)
		if err != nil {
			return nil, "", err
		}
		return notify.FleetSubject(r), "", nil
	}
	r, err := o.cfg.Restarts.Get(o.ctx, k.ns, k.id)
	if err != nil {
		return nil, "", err
	}
	return notify.RestartSubject(r), r.JobID, nil
}

// settle records deliveries of one record with check-and-set, and forgets them as queued.
func (o *Outbox) settle(k recordKey, ds []restart.Delivery) {
	change := func(n **restart.Notifications) {
		if *n == nil {
			*n = &restart.Notifications{}
		}
		for _, d := range ds {
			(*n).Settle(d)
		}
	}
	// The write must land even while the process stops: a delivery not recorded is sent
	// again by the next driver.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), 30*time.Second)
	defer cancel()
	var err error
	switch k.kind {
	case steer.KindFleet:
		_, err = store.Mutate(wctx, o.cfg.Fleets, k.ns, k.id, func(r *fleet.Record) error { change(&r.Notify); return nil })
	default:
		_, err = store.Mutate(wctx, o.cfg.Restarts, k.ns, k.id, func(r *restart.Record) error { change(&r.Notify); return nil })
	}
	if err != nil {
		o.log.Warn("recording notifications in their record", "kind", k.kind, "id", k.id, "err", err)
	}
	o.mu.Lock()
	for _, d := range ds {
		sk := k.sinkKey(d.Sink)
		if d.Seq > o.settled[sk] {
			o.settled[sk] = d.Seq
		}
		delete(o.queued, queueKey{sk, d.Seq})
		o.busy--
	}
	o.mu.Unlock()
	if o.cfg.Observe != nil {
		for _, d := range ds {
			o.cfg.Observe(d.Sink, d.Outcome)
		}
	}
}

// Flush waits until every notification known now is settled, or ctx ends (a command
// about to exit gives its last notifications a bounded time). What a rate limit holds
// goes at once, as its summary, rather than at the window's end.
func (o *Outbox) Flush(ctx context.Context) error {
	if o == nil {
		return nil
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		o.mu.Lock()
		busy := o.busy
		o.mu.Unlock()
		if busy == 0 {
			return nil
		}
		for _, w := range o.workers {
			select {
			case w.hurry <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d notification(s) to %s still unsent: %w", busy, o.unsentSinks(), ctx.Err())
		case <-t.C:
		}
	}
}

// unsentSinks names the sinks that notifications are queued for or in flight to.
func (o *Outbox) unsentSinks() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var names []string
	for k := range o.queued {
		if !slices.Contains(names, k.sink) {
			names = append(names, k.sink)
		}
	}
	if len(names) == 0 {
		return "no sink yet (records still being read)"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// sinkWorker sends one sink's notifications in order, under its rate limit.
type sinkWorker struct {
	o     *Outbox
	name  string
	sink  Sink
	limit *notify.Limiter
	wake  chan struct{}
	hurry chan struct{} // Flush: send what is held now

	mu    sync.Mutex
	queue []item
}

func (w *sinkWorker) push(it item) {
	w.mu.Lock()
	w.queue = append(w.queue, it)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *sinkWorker) take() []item {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

func (w *sinkWorker) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		for items := w.take(); len(items) > 0; items = w.take() {
			var held []item
			for _, it := range items {
				if len(held) == 0 && w.limit.Admit(w.o.cfg.Now()) {
					w.deliver([]item{it}, it.n.Message)
					continue
				}
				held = append(held, it)
			}
			if len(held) > 0 {
				w.summarize(ctx, held)
			}
		}
	}
}

// summarize waits for the rate limit's window to free a message, gathering what comes
// meanwhile, and sends one summary for it all.
func (w *sinkWorker) summarize(ctx context.Context, held []item) {
	wait := w.limit.NextFree(w.o.cfg.Now()).Sub(w.o.cfg.Now())
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-w.hurry:
		}
		t.Stop()
	}
	held = append(held, w.take()...)
	if len(held) == 1 && w.limit.Admit(w.o.cfg.Now()) {
		w.deliver(held, held[0].n.Message)
		return
	}
	w.limit.Admit(w.o.cfg.Now())
	ns := make([]notify.Notification, len(held))
	for i, it := range held {
		ns[i] = it.n
	}
	w.deliver(held, notify.Summary(w.name, ns, w.o.cfg.Now()))
}

// deliver sends m, standing for items, again with backoff until it goes or RetryFor
// passes, and settles the items in their records.
func (w *sinkWorker) deliver(items []item, m notify.Message) {
	items, err := w.send(items, m)
	if len(items) == 0 {
		return // another process settled them all meanwhile
	}
	if err != nil && w.o.ctx.Err() != nil {
		// The process stops: what was not sent stays owed in its record, for the next
		// driver to send.
		w.o.mu.Lock()
		for _, it := range items {
			delete(w.o.queued, queueKey{it.rec.sinkKey(w.name), it.n.Seq})
			w.o.busy--
		}
		w.o.mu.Unlock()
		return
	}
	outcome := restart.DeliverySent
	switch {
	case err != nil:
		outcome = restart.DeliveryFailed
		w.o.log.Warn("a notification was given up", "sink", w.name, "where", w.sink.Where(), "key", m.Key, "err", err)
	case len(items) > 1 || m.Summary != nil:
		outcome = restart.DeliverySummarized
	}
	if err != nil {
		w.warnGivenUp(items, err)
	}
	byRecord := map[recordKey][]restart.Delivery{}
	var order []recordKey
	for _, it := range items {
		d := restart.Delivery{Sink: w.name, Seq: it.n.Seq, Trigger: string(it.n.Trigger), Outcome: outcome, Time: w.o.cfg.Now()}
		if err != nil {
			d.Error = err.Error()
		}
		if _, ok := byRecord[it.rec]; !ok {
			order = append(order, it.rec)
		}
		byRecord[it.rec] = append(byRecord[it.rec], d)
	}
	for _, k := range order {
		w.o.settle(k, byRecord[k])
	}
	for _, it := range items {
		if it.n.Message.Status.Terminal() {
			// Its record may owe nothing more: a last look lets the outbox forget it.
			w.o.Kick(it.rec.kind, it.rec.ns, it.rec.id)
		}
	}
}

// warnGivenUp puts a warning event in the log of each record whose notification was
// given up, as a restart's own failed step is: a restart's through its driver here, or,
// once it has ended, into its record; a fleet's into its record, with check-and-set (its
// driver reads a write of another back and decides again, as after an operator's pause).
func (w *sinkWorker) warnGivenUp(items []item, err error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(w.o.ctx), 30*time.Second)
	defer cancel()
	for _, it := range items {
		now := w.o.cfg.Now()
		msg := fmt.Sprintf("Warning: the %s notification (event %d) to sink %q was given up after %s: %v", it.n.Trigger, it.n.Seq, w.name, w.o.cfg.RetryFor, err)
		var merr error
		switch it.rec.kind {
		case steer.KindFleet:
			_, merr = store.Mutate(wctx, w.o.cfg.Fleets, it.rec.ns, it.rec.id, func(r *fleet.Record) error {
				r.AddEvent(now, restart.EventWarning, msg)
				return nil
			})
		default:
			ev := restart.Event{Time: now, Type: restart.EventWarning, Message: msg}
			if w.o.cfg.Note != nil && w.o.cfg.Note(wctx, it.rec.ns, it.rec.id, ev) {
				continue
			}
			_, merr = store.Mutate(wctx, w.o.cfg.Restarts, it.rec.ns, it.rec.id, func(r *restart.Record) error {
				if !r.Status.Terminal() {
					return errNotEnded
				}
				r.AppendEvent(ev)
				return nil
			})
		}
		if merr != nil && !errors.Is(merr, errNotEnded) {
			w.o.log.Warn("recording a notification given up", "kind", it.rec.kind, "id", it.rec.id, "err", merr)
		}
	}
}

// errNotEnded stops the write of a warning into a record some driver still writes.
var errNotEnded = errors.New("the restart has not ended")

// send sends m, standing for items, again with backoff until it goes or RetryFor passes.
// Before each attempt it keeps only the items their records still owe (owed): the items
// it returns are the ones m was sent (or given up) for, none when every one was settled
// elsewhere.
func (w *sinkWorker) send(items []item, m notify.Message) ([]item, error) {
	if w.sink == nil {
		return items, errors.New("no sink of that name in this process")
	}
	b := cluster.NewBackoff(cluster.RetryPolicy{Initial: w.o.cfg.Backoff, Max: 10 * time.Second, MaxElapsed: w.o.cfg.RetryFor})
	for {
		if items = w.owed(items); len(items) == 0 {
			return nil, nil
		}
		err := w.sink.Send(w.o.ctx, m)
		if err == nil {
			return items, nil
		}
		w.o.log.Debug("sending a notification", "sink", w.name, "key", m.Key, "err", err)
		if !b.Wait(w.o.ctx) {
			return items, err
		}
	}
}

// owed keeps of items those their records still owe this sink, and forgets the others.
// While this process retried a failing sink, its driver may have lost the record's lease,
// and the driver that adopted it sent and settled what this one still holds: sending it
// again would tell the sink twice. A record that cannot be read keeps its items (better
// a repeat, with its key, than a loss).
func (w *sinkWorker) owed(items []item) []item {
	through := map[recordKey]uint64{}
	keep := items[:0:0]
	var gone []item
	for _, it := range items {
		t, read := through[it.rec]
		if !read {
			t = w.o.settledThrough(it.rec, w.name)
			through[it.rec] = t
		}
		if it.n.Seq <= t {
			gone = append(gone, it)
			continue
		}
		keep = append(keep, it)
	}
	if len(gone) > 0 {
		w.o.mu.Lock()
		for _, it := range gone {
			sk := it.rec.sinkKey(w.name)
			delete(w.o.queued, queueKey{sk, it.n.Seq})
			if it.n.Seq > w.o.settled[sk] {
				w.o.settled[sk] = it.n.Seq
			}
			w.o.busy--
		}
		w.o.mu.Unlock()
	}
	return keep
}

// settledThrough is the sequence number through which k's record says sink was settled
// (0 when it cannot be read).
func (o *Outbox) settledThrough(k recordKey, sink string) uint64 {
	var n *restart.Notifications
	switch k.kind {
	case steer.KindFleet:
		if r, err := o.cfg.Fleets.Get(o.ctx, k.ns, k.id); err == nil {
			n = r.Notify
		}
	default:
		if r, err := o.cfg.Restarts.Get(o.ctx, k.ns, k.id); err == nil {
			n = r.Notify
		}
	}
	if n == nil {
		return 0
	}
	return n.Through[sink]
}
