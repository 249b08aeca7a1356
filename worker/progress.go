package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// ErrProgressTooLarge is wrapped by Progress's error for a value whose JSON
// is longer than Config.MaxProgressBytes. Nothing is stored: progress is
// meant to be small (a count, a percentage, a step's name).
var ErrProgressTooLarge = errors.New("jobfence: job progress too large")

// DefaultMaxProgressBytes is Config.MaxProgressBytes's default: 4 KiB.
const DefaultMaxProgressBytes = 4 << 10

// DefaultProgressInterval is Config.ProgressInterval's default: 1 s.
const DefaultProgressInterval = time.Second

// Progress records v, encoded as JSON, as the progress of the job whose
// handler's context ctx is: readers (pgqueue's Get as queue.Job.Progress,
// `jobfence jobs show`, the dashboard's job page) see it while the job
// runs, and it stays after the job ends.
//
// Each write is fenced: it is stored only while the job is running under
// this attempt's fence, so an attempt that lost the job (its lease ran out
// and another worker claimed it) changes nothing, and Progress returns an
// error wrapping queue.ErrStaleFence, then and at every later call.
//
// Writes are throttled to one per Config.ProgressInterval for each job: the
// first call writes at once, in the caller; calls within the interval
// after a write keep only their latest value, which a timer writes once
// the interval has passed, and whatever is still unwritten when the
// handler returns is written before the attempt's outcome. Such a later
// write's failure is logged, not returned. A job that never calls
// Progress costs nothing more.
//
// It returns an error wrapping ErrProgressTooLarge when the JSON is longer
// than Config.MaxProgressBytes, ErrNotInHandler outside a handler (or once
// the handler returned), errors.ErrUnsupported on a backend that does not
// store progress (queue.ProgressRecorder), and json.Marshal's error when v
// does not encode.
func Progress(ctx context.Context, v any) error {
	rc, _ := ctx.Value(runCtxKey{}).(*runCtx)
	if rc == nil {
		return fmt.Errorf("jobfence: progress: %w", ErrNotInHandler)
	}
	id := rc.r.job.ID
	rec, ok := rc.backend.(queue.ProgressRecorder)
	if !ok {
		return fmt.Errorf("jobfence: progress of job %d: the backend %T does not store progress: %w", id, rc.backend, errors.ErrUnsupported)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("jobfence: progress of job %d: %w", id, err)
	}
	if max := rc.w.cfg.MaxProgressBytes; len(b) > max {
		return fmt.Errorf("%w: job %d's progress is %d bytes of JSON, more than the %d of Config.MaxProgressBytes; report a count or a step's name, and record results with RecordOutput",
			ErrProgressTooLarge, id, len(b), max)
	}
	p := rc.progress.Load()
	if p == nil {
		// Made at the first call, so that a job that never reports
		// progress allocates nothing for it.
		p = &progress{w: rc.w, r: rc.r, rec: rec}
		if !rc.progress.CompareAndSwap(nil, p) {
			p = rc.progress.Load()
		}
	}
	return p.set(ctx, b)
}

// progress is one attempt's throttled progress writes.
//
// At most one write is in flight at a time and at most one timer armed,
// never both: set writes at once when the interval since the last write
// has passed and neither is there, and otherwise leaves the value in
// pending for the write in flight or the timer to take. wg counts the
// armed timer and the write in flight, so that end can wait for both: no
// timer or write outlives the attempt.
type progress struct {
	w   *Worker
	r   *running
	rec queue.ProgressRecorder

	mu sync.Mutex
	// pending is the latest value not yet written; nil if none.
	pending []byte
	// last is when the last write began.
	last    time.Time
	timer   *time.Timer
	writing bool
	// stale is set when a write found the job no longer running under the
	// attempt's fence: nothing more is written.
	stale error
	// ended is set by end: nothing more is started.
	ended bool
	wg    sync.WaitGroup
}

// set records b as the latest progress, writing it now or leaving it for
// a later write.
func (p *progress) set(ctx context.Context, b []byte) error {
	p.mu.Lock()
	if p.stale != nil {
		err := p.stale
		p.mu.Unlock()
		return err
	}
	if p.ended {
		p.mu.Unlock()
		return fmt.Errorf("jobfence: progress of job %d after its handler returned: %w", p.r.job.ID, ErrNotInHandler)
	}
	p.pending = b
	if p.writing || p.timer != nil {
		p.mu.Unlock()
		return nil
	}
	if wait := p.w.cfg.ProgressInterval - time.Since(p.last); !p.last.IsZero() && wait > 0 {
		p.arm(wait)
		p.mu.Unlock()
		return nil
	}
	p.begin()
	p.mu.Unlock()
	defer p.wg.Done()
	// Not cut short by the handler's context ending (a timeout, a lost
	// lease): the fence, not the context, decides whether it is stored,
	// and a lost attempt's caller is told so (ErrStaleFence).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.w.cfg.Lease)
	defer cancel()
	return p.send(wctx, b)
}

// begin takes pending for a write; p.mu is held.
func (p *progress) begin() {
	p.pending, p.last, p.writing = nil, time.Now(), true
	p.wg.Add(1)
}

// arm sets the timer to write what is pending after d; p.mu is held.
func (p *progress) arm(d time.Duration) {
	p.wg.Add(1)
	p.timer = time.AfterFunc(max(d, 0), p.fire)
}

// fire writes, at the end of an interval, the value that calls within it
// left pending. It runs on the timer's goroutine, under a context that
// ends with the attempt's (a lost or cancelled job writes nothing more).
func (p *progress) fire() {
	defer p.wg.Done()
	p.mu.Lock()
	p.timer = nil
	if p.ended || p.stale != nil || p.pending == nil {
		p.mu.Unlock()
		return
	}
	b := p.pending
	p.begin()
	p.mu.Unlock()
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.r.ctx, p.w.cfg.Lease)
	defer cancel()
	if err := p.send(ctx, b); err != nil && !errors.Is(err, queue.ErrStaleFence) && ctx.Err() == nil {
		p.w.logJob(ctx, slog.LevelWarn, "jobfence: writing the job's progress failed; the next write, or the one before its outcome, tries again", p.r.job,
			slog.Any("err", err))
	}
}

// send writes b under the attempt's fence, then arms the timer for a value
// that came meanwhile. A value whose write failed, with none newer, is
// kept for the next write; a stale fence ends the writes.
func (p *progress) send(ctx context.Context, b []byte) error {
	err := p.rec.RecordProgress(ctx, p.r.lease, b)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writing = false
	switch {
	case errors.Is(err, queue.ErrStaleFence):
		p.stale = fmt.Errorf("jobfence: progress of job %d: %w", p.r.job.ID, err)
		p.pending = nil
		return p.stale
	case err != nil:
		if p.pending == nil {
			p.pending = b
		}
		err = fmt.Errorf("jobfence: progress of job %d: %w", p.r.job.ID, err)
	}
	if p.pending != nil && !p.ended && ctx.Err() == nil {
		p.arm(p.w.cfg.ProgressInterval - time.Since(p.last))
	}
	return err
}

// end stops p's timer, waits for a write in flight, and, with flush,
// writes what is still pending (best effort, bounded by the lease): the
// worker calls it before the attempt's outcome, so the last value
// reported is stored, under the fence, while the job still runs.
func (p *progress) end(flush bool) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = true
	if p.timer != nil && p.timer.Stop() {
		p.wg.Done()
	}
	p.timer = nil
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	b := p.pending
	p.pending = nil
	stale := p.stale != nil
	p.mu.Unlock()
	if !flush || b == nil || stale {
		return
	}
	// The handler's context may have ended (a timeout) while its job is
	// still ours to finish; the fence, not the context, decides.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.r.ctx), p.w.cfg.Lease)
	defer cancel()
	// A stale fence means the job was lost, which is logged as such.
	if err := p.rec.RecordProgress(ctx, p.r.lease, b); err != nil && !errors.Is(err, queue.ErrStaleFence) {
		p.w.logJob(ctx, slog.LevelWarn, "jobfence: writing the job's last progress before its outcome failed; the progress stored is an earlier one", p.r.job,
			slog.Any("err", err))
	}
}

// endProgress ends r's progress writes (see progress.end), if its handler
// reported any.
func (r *running) endProgress(flush bool) {
	if r.rc == nil {
		return
	}
	if p := r.rc.progress.Load(); p != nil {
		p.end(flush)
	}
}
