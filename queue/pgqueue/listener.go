package pgqueue

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// subscribeWait bounds how long a subscription waits for its LISTEN:
	// a database that accepts connections but does not answer must not
	// hold up the caller (a worker's Start); the listener keeps trying.
	subscribeWait = 5 * time.Second
	// listenStepTimeout bounds a connect and each LISTEN or UNLISTEN: one
	// that hangs (a silent partition) would otherwise stop reconnecting.
	listenStepTimeout = 10 * time.Second
	minListenBackoff  = 100 * time.Millisecond
	maxListenBackoff  = 10 * time.Second
)

// listener shares one LISTEN connection among all of a Client's
// subscriptions: wake-ups of any number of queues, cancellations and
// pauses. Each LISTEN connection is a server backend held for good, and a
// fleet runs out of connections first, so a worker holds one whatever its
// number of queues. The connection opens with the first subscription and
// closes when the last one ends; one loop reads it, reconnects with
// backoff and LISTENs again on every channel, telling each subscription
// that the connection was lost and is back.
type listener struct {
	log *slog.Logger
	// connect opens a connection for LISTEN alone (see Client.listenConn).
	connect func(context.Context) (*pgx.Conn, error)

	mu sync.Mutex
	// subs holds the subscriptions by what they hear.
	subs map[topic]map[*subscription]struct{}
	// channels counts the subscriptions of each channel: the channels
	// the connection must LISTEN on.
	channels map[string]int
	// run is the loop of the current connection; nil when no
	// subscription is left.
	run *listenRun
}

// topic is what a subscription hears: every notification of channel, or
// (keyed) only those of channel whose payload is key.
type topic struct {
	channel string
	key     string
	keyed   bool
}

// subscription is one subscriber. deliver and up must not block: the
// listener calls them from the loop that reads the connection, and a slow
// subscriber would hold up every other one.
type subscription struct {
	topic   topic
	deliver func(payload string)
	up      func(bool)
	// ready is closed once up(true) has first returned.
	ready chan struct{}
	// Guarded by listener.mu. told: up(true) was called for the current
	// connection and up(false) not since; everUp: ready is closed.
	told, everUp bool
}

type runPhase int

const (
	phaseConnecting runPhase = iota
	phaseUp
	phaseDown // waiting to reconnect
)

// listenRun is the state of one loop, from the first subscription to the
// end of the last. Its fields but ctx and cancel are guarded by
// listener.mu. A loop whose run is no longer listener.run has been retired
// and touches nothing outside its run.
type listenRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	phase  runPhase
	// listening holds the channels LISTENed on the current connection.
	listening map[string]bool
	// dirty says subscriptions came or went since the last sync.
	dirty bool
	// interrupt ends the loop's wait for a notification so that it syncs;
	// nil when it is not waiting.
	interrupt context.CancelFunc
	// changed is closed, and replaced, whenever phase changes or a sync
	// ends.
	changed chan struct{}
}

func newListener(log *slog.Logger, connect func(context.Context) (*pgx.Conn, error)) *listener {
	return &listener{
		log:      log,
		connect:  connect,
		subs:     make(map[topic]map[*subscription]struct{}),
		channels: make(map[string]int),
	}
}

// subscribe hands the notifications of t to deliver until ctx ends. up,
// when not nil, is told each time t's channel is LISTENed on a new
// connection (true) and each time that connection is lost (false):
// notifications sent in between are lost, and a subscriber that keeps
// state from them re-reads it on true. Unless the database is down or slow
// to answer (subscribeWait), up(true) has been called when subscribe
// returns, so no notification sent afterwards is missed.
func (l *listener) subscribe(ctx context.Context, t topic, deliver func(string), up func(bool)) {
	if up == nil {
		up = func(bool) {}
	}
	s := &subscription{topic: t, deliver: deliver, up: up, ready: make(chan struct{})}
	l.mu.Lock()
	set := l.subs[t]
	if set == nil {
		set = make(map[*subscription]struct{})
		l.subs[t] = set
	}
	set[s] = struct{}{}
	l.channels[t.channel]++
	if l.run == nil {
		l.start()
	} else {
		l.run.poke()
	}
	l.mu.Unlock()
	context.AfterFunc(ctx, func() { l.unsubscribe(s) })

	timeout := time.NewTimer(subscribeWait)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		r := l.run
		var changed chan struct{}
		if r != nil && r.phase != phaseDown {
			changed = r.changed
		}
		l.mu.Unlock()
		if changed == nil {
			return // ended, or down: the loop tells s when it is back
		}
		select {
		case <-s.ready:
			return
		case <-changed:
		case <-timeout.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// unsubscribe removes s. The last subscription closes the connection; the
// last of a channel has the loop UNLISTEN it.
func (l *listener) unsubscribe(s *subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.subs[s.topic]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(l.subs, s.topic)
	}
	l.channels[s.topic.channel]--
	if l.channels[s.topic.channel] > 0 {
		return
	}
	delete(l.channels, s.topic.channel)
	if len(l.channels) == 0 {
		l.run.cancel()
		l.run = nil
		return
	}
	l.run.poke()
}

// start begins a loop; l.mu is held.
func (l *listener) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &listenRun{ctx: ctx, cancel: cancel, listening: make(map[string]bool), changed: make(chan struct{})}
	l.run = r
	go l.loop(r)
}

// poke has the loop sync subscriptions with the connection; l.mu is held.
func (r *listenRun) poke() {
	r.dirty = true
	if r.interrupt != nil {
		r.interrupt()
	}
}

// setPhase moves r to p and wakes the subscriptions waiting on r;
// l.mu is held.
func (r *listenRun) setPhase(p runPhase) {
	r.phase = p
	r.broadcast()
}

func (r *listenRun) broadcast() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// loop connects, listens and reconnects with backoff until r is retired.
func (l *listener) loop(r *listenRun) {
	backoff := minListenBackoff
	lost := false
	for {
		connected, err := l.session(r, lost)
		if r.ctx.Err() != nil {
			return
		}
		if connected {
			backoff = minListenBackoff
		}
		channels := l.down(r)
		lost = true
		msg := "jobfence: cannot open a LISTEN connection; polling until it can"
		if connected {
			msg = "jobfence: LISTEN connection lost; polling until it is back"
		}
		l.log.Warn(msg, "channels", strings.Join(channels, ","), "err", err, "retry_in", backoff)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxListenBackoff)
		l.mu.Lock()
		if l.run == r {
			r.setPhase(phaseConnecting)
		}
		l.mu.Unlock()
	}
}

// session runs one connection: it LISTENs on the subscribed channels and
// delivers notifications until the connection fails or r is retired.
// connected says whether its first LISTENs succeeded: a connection that
// opens but cannot LISTEN must not reset the backoff.
func (l *listener) session(r *listenRun, lost bool) (connected bool, err error) {
	cctx, cancel := context.WithTimeout(r.ctx, listenStepTimeout)
	pgc, err := l.connect(cctx)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pgc.Close(ctx)
	}()
	l.mu.Lock()
	if l.run == r {
		r.setPhase(phaseUp)
	}
	l.mu.Unlock()
	var batch []*subscription
	for {
		if err := l.sync(r, pgc); err != nil {
			return connected, err
		}
		if !connected && lost {
			l.log.Info("jobfence: LISTEN connection back")
		}
		connected = true
		wctx, stop := context.WithCancel(r.ctx)
		l.mu.Lock()
		if r.dirty || l.run != r {
			l.mu.Unlock()
			stop()
			if r.ctx.Err() != nil {
				return true, r.ctx.Err()
			}
			continue
		}
		r.interrupt = stop
		l.mu.Unlock()
		err := l.receive(r, wctx, pgc, &batch)
		l.mu.Lock()
		r.interrupt = nil
		l.mu.Unlock()
		stop()
		if r.ctx.Err() != nil {
			return true, r.ctx.Err()
		}
		if wctx.Err() == nil || pgc.IsClosed() {
			return true, err
		}
		// Poked: sync and wait again.
	}
}

// receive delivers notifications until the connection fails or ctx ends.
// batch is scratch space for dispatch.
func (l *listener) receive(r *listenRun, ctx context.Context, pgc *pgx.Conn, batch *[]*subscription) error {
	for {
		n, err := pgc.WaitForNotification(ctx)
		if n != nil {
			l.dispatch(r, n, batch)
		}
		if err != nil {
			return err
		}
	}
}

// dispatch hands n to the subscriptions that hear it.
func (l *listener) dispatch(r *listenRun, n *pgconn.Notification, batch *[]*subscription) {
	b := (*batch)[:0]
	l.mu.Lock()
	if l.run == r {
		for s := range l.subs[topic{channel: n.Channel}] {
			b = append(b, s)
		}
		for s := range l.subs[topic{channel: n.Channel, key: n.Payload, keyed: true}] {
			b = append(b, s)
		}
	}
	l.mu.Unlock()
	for _, s := range b {
		s.deliver(n.Payload)
	}
	clear(b)
	*batch = b[:0]
}

// deliverLocal hands payload to this client's subscriptions of channel, as
// a notification of it would: for work this client's own committed
// statements did, its subscribers need not wait for the notification's
// loop through the server (it comes too; a wake-up is idempotent).
func (l *listener) deliverLocal(channel, payload string) {
	var b []*subscription
	l.mu.Lock()
	for s := range l.subs[topic{channel: channel}] {
		b = append(b, s)
	}
	for s := range l.subs[topic{channel: channel, key: payload, keyed: true}] {
		b = append(b, s)
	}
	l.mu.Unlock()
	for _, s := range b {
		s.deliver(payload)
	}
}

// sync LISTENs on the channels that have subscriptions, UNLISTENs those
// that no longer have any, and tells each subscription not yet told that
// its channel is listened on.
func (l *listener) sync(r *listenRun, pgc *pgx.Conn) error {
	l.mu.Lock()
	if l.run != r {
		l.mu.Unlock()
		return r.ctx.Err()
	}
	r.dirty = false
	var add, drop []string
	for ch := range l.channels {
		if !r.listening[ch] {
			add = append(add, ch)
		}
	}
	for ch := range r.listening {
		if l.channels[ch] == 0 {
			drop = append(drop, ch)
		}
	}
	l.mu.Unlock()
	// Sorted, so that the connection's statements read the same every time.
	slices.Sort(add)
	slices.Sort(drop)
	for _, ch := range drop {
		if err := listenExec(r.ctx, pgc, "UNLISTEN", ch); err != nil {
			return err
		}
	}
	for _, ch := range add {
		if err := listenExec(r.ctx, pgc, "LISTEN", ch); err != nil {
			return err
		}
	}

	var tell, first []*subscription
	l.mu.Lock()
	if l.run != r {
		l.mu.Unlock()
		return r.ctx.Err()
	}
	for _, ch := range drop {
		delete(r.listening, ch)
	}
	for _, ch := range add {
		r.listening[ch] = true
	}
	for t, set := range l.subs {
		if !r.listening[t.channel] {
			continue // subscribed during the LISTENs: the next sync has it
		}
		for s := range set {
			if s.told {
				continue
			}
			s.told = true
			tell = append(tell, s)
			if !s.everUp {
				s.everUp = true
				first = append(first, s)
			}
		}
	}
	l.mu.Unlock()
	for _, s := range tell {
		s.up(true)
	}
	for _, s := range first {
		close(s.ready)
	}
	if len(tell) > 0 {
		l.mu.Lock()
		r.broadcast()
		l.mu.Unlock()
	}
	return nil
}

// down records that r's connection is lost and tells the subscriptions
// that were told it was up. It returns the channels that lost their
// LISTEN, for the log.
func (l *listener) down(r *listenRun) []string {
	var tell []*subscription
	l.mu.Lock()
	if l.run != r {
		l.mu.Unlock()
		return nil
	}
	clear(r.listening)
	for _, set := range l.subs {
		for s := range set {
			if s.told {
				s.told = false
				tell = append(tell, s)
			}
		}
	}
	channels := make([]string, 0, len(l.channels))
	for ch := range l.channels {
		channels = append(channels, ch)
	}
	r.setPhase(phaseDown)
	l.mu.Unlock()
	for _, s := range tell {
		s.up(false)
	}
	slices.Sort(channels)
	return channels
}

// listenExec runs LISTEN or UNLISTEN of channel.
func listenExec(ctx context.Context, pgc *pgx.Conn, verb, channel string) error {
	ctx, cancel := context.WithTimeout(ctx, listenStepTimeout)
	defer cancel()
	if _, err := pgc.Exec(ctx, verb+" "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("pgqueue: %s %s: %w", verb, channel, err)
	}
	return nil
}
