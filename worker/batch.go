package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// The defaults of BatchOpts.
const (
	// DefaultBatchMaxSize is BatchOpts.MaxSize's default.
	DefaultBatchMaxSize = 100
	// DefaultBatchLinger is BatchOpts.Linger's default.
	DefaultBatchLinger = 100 * time.Millisecond
)

// ErrBatchResults is wrapped by the error every job of a batch gets when
// its batch handler returned a result slice whose length is not the
// number of jobs it was given: which job failed cannot be told, so each
// takes the retry path.
var ErrBatchResults = errors.New("jobfence: batch handler returned the wrong number of results")

// BatchOpts tunes a batch handler (AddBatch).
type BatchOpts struct {
	// MaxSize is the most jobs one call of the handler gets. Zero takes
	// DefaultBatchMaxSize (100); negative is refused. A batch is also
	// bounded by the worker's concurrency (the sum of Config.Queues):
	// each job of a batch holds a worker slot, and a limit's slot where a
	// limit governs it, as a job run alone does.
	MaxSize int
	// Linger is how long a batch waits, from its first job, for more jobs
	// before the handler is called with those it has; a batch that
	// reaches its size is handed over at once. Zero takes
	// DefaultBatchLinger (100ms); negative is refused. The linger counts
	// towards each job's timeout.
	Linger time.Duration
	// Timeout bounds each job's attempt as HandlerOptions.Timeout does;
	// the batch's context ends at the earliest of its jobs' timeouts and
	// deadlines.
	Timeout time.Duration
}

// withDefaults returns o with its zero fields set to their defaults, or
// an error that says what is wrong with o for kind.
func (o BatchOpts) withDefaults(kind string) (BatchOpts, error) {
	switch {
	case o.MaxSize < 0:
		return o, fmt.Errorf("jobfence: batch handler of kind %q: BatchOpts.MaxSize is %d; want 0 (the default, %d) or more",
			kind, o.MaxSize, DefaultBatchMaxSize)
	case o.Linger < 0:
		return o, fmt.Errorf("jobfence: batch handler of kind %q: BatchOpts.Linger is %s; want 0 (the default, %s) or more",
			kind, o.Linger, DefaultBatchLinger)
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultBatchMaxSize
	}
	if o.Linger == 0 {
		o.Linger = DefaultBatchLinger
	}
	return o, nil
}

// AddBatch registers fn as the batch handler of T's kind: a worker hands
// up to opts.MaxSize claimed jobs of the kind to one call of fn (a bulk
// API call for many jobs), waiting at most opts.Linger to fill a batch.
//
// Each job keeps its own claim: its fence, lease, attempt, and outcome.
// fn returns one result per job, in the order of jobs: nil completes the
// job; an error takes that job's retry path (JobSnooze, JobCancel,
// JobRateLimited as for a plain handler), and RecordBatchOutput records a
// job's output. A job whose claim was lost while the batch ran (its lease
// ran out, another worker claimed it) has its outcome refused under its
// stale fence, alone: the others land. A result slice of the wrong length
// fails every job with an error wrapping ErrBatchResults; a panic fails
// every job with the *PanicError. The outcomes are recorded as a plain
// handler's are, by the worker's completers, which write many in one
// statement.
//
// The middleware wraps each job's part in the batch (its wait for the
// batch and its result), not fn. It panics if the kind is registered
// already, or if opts are invalid (a negative MaxSize or Linger): those
// are programming errors, found at start.
func AddBatch[T queue.Args](r *Registry, fn func(ctx context.Context, jobs []*Job[T]) []error, opts ...BatchOpts) {
	kind := kindOf[T]()
	var o BatchOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	o, err := o.withDefaults(kind)
	if err != nil {
		panic(err.Error())
	}
	h := &handler{kind: kind, typeTimeout: typeTimeout[T](), opts: HandlerOptions{Timeout: o.Timeout}, batch: &o}
	h.runBatch = func(ctx context.Context, jobs []*queue.Job) []error {
		errs := make([]error, len(jobs))
		typed := make([]*Job[T], 0, len(jobs))
		at := make([]int, 0, len(jobs))
		for i, job := range jobs {
			j, err := decode[T](job)
			if err != nil {
				errs[i] = err
				continue
			}
			typed = append(typed, j)
			at = append(at, i)
		}
		if len(typed) == 0 {
			return errs
		}
		res := fn(ctx, typed)
		if len(res) != len(typed) {
			err := fmt.Errorf("%w: kind %q: %d results for %d jobs; return one per job, in their order (nil for a job that completed)",
				ErrBatchResults, kind, len(res), len(typed))
			for _, i := range at {
				errs[i] = err
			}
			return errs
		}
		for k, i := range at {
			errs[i] = res[k]
		}
		return errs
	}
	r.add(h)
}

// batcher gathers one kind's claimed jobs into batches for its handler,
// in one worker.
type batcher struct {
	h *handler
	// size is the most jobs a batch takes: BatchOpts.MaxSize, or the
	// worker's concurrency if smaller (no more jobs can be running).
	size int
	mu   sync.Mutex
	// open is the batch taking jobs, nil when none.
	open *batchRun
}

// batchRun is one batch: its members, and full, closed once it has size
// members.
type batchRun struct {
	members []*batchMember
	full    chan struct{}
}

// batchMember is one job's part in a batch: the runner that holds its
// claim waits on done for err.
type batchMember struct {
	job  *queue.Job
	ctx  context.Context
	rc   *runCtx
	done chan struct{}
	err  error
}

// newBatchers returns a batcher for each batch handler of reg, sized for
// a worker of concurrency slots.
func newBatchers(reg *Registry, concurrency int) map[string]*batcher {
	var out map[string]*batcher
	for kind, h := range reg.handlers {
		if h.batch == nil {
			continue
		}
		if out == nil {
			out = map[string]*batcher{}
		}
		out[kind] = &batcher{h: h, size: max(1, min(h.batch.MaxSize, concurrency))}
	}
	return out
}

// joinBatch is a batch job's handler call, as the runner holding its
// claim makes it (under the middleware): the job joins the kind's open
// batch, or opens one and leads it (waits for it to fill or linger, then
// calls the handler for every member), and returns the job's result.
func (w *Worker) joinBatch(ctx context.Context, job *queue.Job, r *running) error {
	b := w.batchers[job.Kind]
	m := &batchMember{job: job, ctx: ctx, rc: r.rc, done: make(chan struct{})}
	b.mu.Lock()
	run, lead := b.open, false
	if run == nil {
		run, lead = &batchRun{full: make(chan struct{})}, true
		b.open = run
	}
	run.members = append(run.members, m)
	if len(run.members) >= b.size {
		close(run.full)
		b.open = nil
	}
	b.mu.Unlock()
	if lead {
		t := time.NewTimer(b.h.batch.Linger)
		select {
		case <-run.full:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		b.mu.Lock()
		if b.open == run {
			b.open = nil
		}
		b.mu.Unlock()
		w.runBatch(b.h, run.members)
	}
	<-m.done
	return m.err
}

// batchCtxKey keys a batch handler's context's batchCtx.
type batchCtxKey struct{}

// batchCtx is what a batch handler's context carries: each member's
// runCtx, by job ID, for RecordBatchOutput.
type batchCtx struct {
	members map[int64]*runCtx
}

// runBatch calls h's batch function for the members whose contexts have
// not ended (a member whose claim was lost or timed out while the batch
// gathered goes its own way with its context's cause), sets each member's
// result, and releases them.
func (w *Worker) runBatch(h *handler, members []*batchMember) {
	live := make([]*batchMember, 0, len(members))
	for _, m := range members {
		if m.ctx.Err() != nil {
			m.err = context.Cause(m.ctx)
			close(m.done)
			continue
		}
		live = append(live, m)
	}
	if len(live) == 0 {
		return
	}
	bc := &batchCtx{members: make(map[int64]*runCtx, len(live))}
	jobs := make([]*queue.Job, len(live))
	var earliest time.Time
	for i, m := range live {
		jobs[i] = m.job
		bc.members[m.job.ID] = m.rc
		if d, ok := m.ctx.Deadline(); ok && (earliest.IsZero() || d.Before(earliest)) {
			earliest = d
		}
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), batchCtxKey{}, bc))
	defer cancel(nil)
	if !earliest.IsZero() {
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadlineCause(ctx, earliest, errBatchDeadline)
		defer cancelD()
	}
	// The batch's context ends once every member's has (each lost, or
	// cancelled, or the worker stopping): no job is left to act for.
	var left atomic.Int64
	left.Store(int64(len(live)))
	for _, m := range live {
		stop := context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(m.ctx))
			}
		})
		defer stop()
	}
	errs := callBatch(ctx, h, jobs)
	for i, m := range live {
		m.err = errs[i]
		close(m.done)
	}
}

// errBatchDeadline is the cause of a batch handler's context ending at the
// earliest timeout or deadline of its jobs.
var errBatchDeadline = errors.New("jobfence: the batch reached the earliest timeout or deadline of its jobs")

// callBatch calls h's batch function, turning a panic into every job's
// *PanicError.
func callBatch(ctx context.Context, h *handler, jobs []*queue.Job) (errs []error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: string(debug.Stack())}
			errs = make([]error, len(jobs))
			for i := range errs {
				errs[i] = pe
			}
		}
	}()
	return h.runBatch(ctx, jobs)
}

// RecordBatchOutput records v, encoded as JSON, as the output of job, a
// job of the batch whose handler's context ctx is (AddBatch), as
// RecordOutput does for a plain handler's job: stored with the job's
// fenced completion if its result is nil, nothing otherwise. It returns
// an error wrapping ErrNotInHandler outside a batch handler or for a job
// not in its batch, ErrOutputTooLarge for JSON longer than
// Config.MaxOutputBytes, and json.Marshal's error when v does not encode.
func RecordBatchOutput(ctx context.Context, job *queue.Job, v any) error {
	bc, _ := ctx.Value(batchCtxKey{}).(*batchCtx)
	if bc == nil {
		return fmt.Errorf("jobfence: record batch output: %w: not a batch handler's context", ErrNotInHandler)
	}
	if job == nil {
		return fmt.Errorf("jobfence: record batch output: %w: nil job", ErrNotInHandler)
	}
	rc := bc.members[job.ID]
	if rc == nil {
		return fmt.Errorf("jobfence: record batch output: %w: job %d is not in this batch", ErrNotInHandler, job.ID)
	}
	return rc.record(v)
}
