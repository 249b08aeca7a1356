package pgqueue

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// wakeSendTimeout bounds a wake-up that a client sends in the background
// (wakes.sender): its wait for a pool connection and its round trip. A
// wake-up that misses it is logged; its jobs wait for the workers' poll.
const wakeSendTimeout = 10 * time.Second

// wakes coalesces a client's wake-ups per queue: at most one wake-up of
// a queue is in flight from the client at a time, and the inserts that
// commit meanwhile ride on one more, sent when it is done. A busy
// worker's fetch loop acts on one wake-up per claim whatever the number
// sent; each NOTIFY is a transaction and a commit record on the server,
// a signal to every listening backend, and a delivery, a listener
// goroutine and a fetch-loop wake-up in every worker.
//
// The guarantee kept: every ready job's insert is followed by a wake-up
// whose transaction begins after the job's commit. A wake-up that began
// before it may be delivered and acted on before the job is visible, and
// the job would then wait for the poll. The argument, per job J of
// queue q:
//
//   - J's insert takes q's wake-up (take) when none is in flight: the
//     wake-up rides in J's own batch after its COMMIT (enqueueAndWake),
//     or follows J's committed insert (Enqueue's second round trip).
//   - Otherwise J's insert sends none and, once its commit's reply is in
//     (J is committed), tells committed. If a wake-up W of q is still in
//     flight, it marks q dirty. Whoever finishes W (done, under the same
//     lock) sees the mark and sends one more wake-up, W'. The mark was
//     made after J's commit and W' is sent after the mark was seen, so W'
//     begins after J's commit; the mark is cleared as W' is sent, and a
//     mark made later is seen when W' is done. If no wake-up is in flight
//     when J's insert tells committed (W ended between J's batch and its
//     reply), it sends one itself, after its commit. Nothing counts on
//     W itself: it may have notified nothing (wakeQueueSQL skips a job
//     that a limit governs) or failed.
//
// So the wake-ups of a queue in flight at once number one, and each
// insert costs at most one mark; a queue's sends end when no insert
// marked it during the last. Follow-up wake-ups go out in the background
// (sender), so an insert never waits for another insert's wake-up; they
// are bounded by wakeSendTimeout, logged when they fail, and stopped by
// close. After close, every insert sends its own wake-up as before.
//
// The jobs that grants, releases of workflow tasks and promotions make
// available take the same path once their transaction has committed
// (wakeReady). Transactional inserts and completions (EnqueueTx,
// InsertTx, FinishTx: the NOTIFY is part of the caller's transaction)
// and the wake-ups of EnqueueMany, workflows' inserts and retries keep
// their own paths.
type wakes struct {
	// send wakes q's workers in a transaction of its own (wakeSQL).
	send func(ctx context.Context, q string) error
	log  *slog.Logger
	// ctx ends at close: it bounds the background senders.
	ctx    context.Context
	cancel context.CancelFunc
	// senders waits for the background senders, for close; running
	// counts them, for the test that closes a client.
	senders sync.WaitGroup
	running atomic.Int64

	mu sync.Mutex
	// flying holds the queues whose wake-up is in flight, each with its
	// mark: an insert committed without a wake-up since that one was sent.
	flying map[string]bool
	// begun and ended count, per queue, the wake-ups the background
	// senders began and ended, for wait.
	begun, ended map[string]uint64
	closed       bool

	// sent counts the wake-ups that take and the senders let out, for the
	// tests that count them.
	sent atomic.Int64
}

func newWakes(log *slog.Logger, send func(context.Context, string) error) *wakes {
	ctx, cancel := context.WithCancel(context.Background())
	return &wakes{send: send, log: log, ctx: ctx, cancel: cancel, flying: make(map[string]bool),
		begun: make(map[string]uint64), ended: make(map[string]uint64)}
}

// wakeTurn is what take tells an insert to do about its wake-up.
type wakeTurn int

const (
	// wakeRide: another wake-up of the queue is in flight; send none,
	// and tell committed once the job is committed and ready.
	wakeRide wakeTurn = iota
	// wakeSend: send the wake-up, then tell done.
	wakeSend
	// wakeOwn: the client is closed; send the wake-up, and that is all.
	wakeOwn
)

// take says whether the caller sends q's wake-up now (none is in flight)
// or rides on the next.
func (w *wakes) take(q string) wakeTurn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.sent.Add(1)
		return wakeOwn
	}
	if _, busy := w.flying[q]; busy {
		return wakeRide
	}
	w.flying[q] = false
	w.sent.Add(1)
	return wakeSend
}

// done ends the wake-up of q that take gave the caller (wakeSend), once
// its reply is in or its batch failed, and sends the next one in the
// background if an insert marked q meanwhile. It reports whether the
// caller must send that one itself: q was marked, and the client was
// closed meanwhile.
func (w *wakes) done(q string) (sendAgain bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.flying[q] {
		delete(w.flying, q)
		return false
	}
	if w.closed {
		delete(w.flying, q)
		w.sent.Add(1)
		return true
	}
	w.flying[q] = false
	w.startSender(q)
	return false
}

// committed is told by an insert that sent no wake-up (wakeRide) that its job is committed and ready: it marks q for the wake-up in
// flight, or, if that one is done, sends one in the background; on a
// closed client it sends it through ctx before it returns.
func (w *wakes) committed(ctx context.Context, q string) {
	w.mu.Lock()
	if !w.closed {
		if _, busy := w.flying[q]; busy {
			w.flying[q] = true
		} else {
			w.flying[q] = false
			w.startSender(q)
		}
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.sent.Add(1)
	w.sendLogged(ctx, q)
}

// startSender starts a background sender of q's wake-up; q is in flying.
// w.mu is held and the client is not closed, so close waits for it.
func (w *wakes) startSender(q string) {
	w.sent.Add(1)
	w.begun[q]++
	w.senders.Add(1)
	w.running.Add(1)
	go w.sender(q)
}

// sender sends q's wake-up, and again for as long as inserts mark q
// while one is in flight.
func (w *wakes) sender(q string) {
	defer w.senders.Done()
	defer w.running.Add(-1)
	for {
		ctx, cancel := context.WithTimeout(w.ctx, wakeSendTimeout)
		w.sendLogged(ctx, q)
		cancel()
		w.mu.Lock()
		w.ended[q]++
		marked := w.flying[q]
		if !marked || w.closed {
			delete(w.flying, q)
			w.mu.Unlock()
			if marked {
				w.log.Warn("pgqueue: client closed before waking the workers of jobs just made ready; they find them at their next poll", "queue", q)
			}
			return
		}
		w.flying[q] = false
		w.sent.Add(1)
		w.begun[q]++
		w.mu.Unlock()
	}
}

// sendLogged sends q's wake-up. A wake-up is a hint: the jobs are
// committed whether or not it goes out, and the workers' polls find
// them, so a failure is logged, not returned.
func (w *wakes) sendLogged(ctx context.Context, q string) {
	if err := w.send(ctx, q); err != nil {
		w.log.Warn("pgqueue: jobs are ready, but waking their workers failed; they find the jobs at their next poll",
			"queue", q, "err", err)
	}
}

// wait waits until the wake-ups that jobs committed before it was called
// need have been sent, or ctx ends, or the client is closed: for each
// queue in flight, the background wake-up being sent and, if the queue is
// marked, the one more its mark calls for. Wake-ups that later jobs call
// for do not hold it: a service that keeps inserting keeps a sender
// going, and a stopping worker waits only for its own.
func (w *wakes) wait(ctx context.Context) error {
	w.mu.Lock()
	want := make(map[string]uint64, len(w.flying))
	for q, marked := range w.flying {
		n := w.begun[q]
		if marked {
			n++
		}
		if n > w.ended[q] {
			want[q] = n
		}
	}
	w.mu.Unlock()
	for {
		w.mu.Lock()
		for q, n := range want {
			if w.ended[q] >= n {
				delete(want, q)
			}
		}
		left, closed := len(want), w.closed
		w.mu.Unlock()
		if left == 0 || closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// close stops the background senders and waits for them to return: a
// wake-up they were sending is cancelled (logged), and from then on each
// insert sends its own.
func (w *wakes) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.senders.Wait()
}

// wakeReady wakes the workers of the queues in ready (the jobs made
// available per queue), once the transaction that made them available has
// committed: this client's own fetch loops at once (a slot or a release
// goes round a round trip sooner), and every other process's through a
// NOTIFY that wakes sends in the background, in a transaction of its own
// (committed). Grants, releases and promotions send no NOTIFY of their
// own: inside their durable transaction it would make the commit take
// PostgreSQL's notify lock, which every notifying commit of the server
// takes in turn and holds through its WAL flush (docs/benchmarks/code.md).
func (c *Client) wakeReady(ctx context.Context, ready map[string]int) {
	for q, n := range ready {
		if n > 0 {
			c.listener.deliverLocal(insertChannel, q)
			c.wakes.committed(ctx, q)
		}
	}
}
