package jobfencetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// WorkerConfig returns cfg with the zero fields a test wants short set:
// PollInterval 50ms, PromoteInterval 50ms (a job scheduled, retried or
// snoozed into the near future runs soon after its time), Lease 10s (a paused or lost job comes back quickly,
// yet a slow handler under the race detector keeps its lease),
// RescueInterval 1s, PruneInterval 1m, and a Logger that prints warnings
// and errors only. Other zero fields keep worker.Config's defaults.
func WorkerConfig(cfg worker.Config) worker.Config {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.PromoteInterval == 0 {
		cfg.PromoteInterval = 50 * time.Millisecond
	}
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	if cfg.RescueInterval == 0 {
		cfg.RescueInterval = time.Second
	}
	if cfg.PruneInterval == 0 {
		cfg.PruneInterval = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return cfg
}

// Worker runs jobs one at a time, synchronously, for Work, WorkNext and
// Drain.
// It is a worker.Worker that is never started.
type Worker struct {
	client *pgqueue.Client
	w      *worker.Worker
}

// Client is what NewWorker and WaitFinal use of your service's
// *jobfence.Client, which implements it: pass the client. It is an
// interface, not the type, because package jobfence's packages
// (pgqueue, worker, scheduler) test themselves with this package, which
// therefore cannot import package jobfence.
type Client interface {
	// PGQueue is jobfence.Client.PGQueue: the client's pgqueue.Client.
	PGQueue() *pgqueue.Client
	// Handlers is jobfence.Client.Handlers: Config.Handlers.
	Handlers() *worker.Registry
	// WorkerConfig is jobfence.Client.WorkerConfig: the configuration
	// the client builds its worker from.
	WorkerConfig() worker.Config
}

// NewWorker returns a Worker running the handlers of client
// (Client.Handlers) on its pgqueue client, with WorkerConfig of the
// client's worker configuration (Client.WorkerConfig: its middleware,
// hooks, timeouts, retry policy), each of the client's queues with one
// slot: the same code your service's worker runs, one job at a time. Do
// not Start client in the same test: a started client's worker claims
// the jobs this Worker means to run. It fails t for an insert-only
// client, which has no handlers to run, and when worker.New refuses the
// configuration.
func NewWorker(t TestingT, client Client) *Worker {
	t.Helper()
	if isNil(client) {
		t.Fatalf("jobfencetest: new worker: nil client")
		return nil
	}
	reg := client.Handlers()
	if reg == nil || len(reg.Kinds()) == 0 {
		t.Fatalf("jobfencetest: new worker: the client is insert-only: it has no handlers to run; give its Config Queues and Handlers")
		return nil
	}
	cfg := client.WorkerConfig()
	// One slot per queue: it runs one job at a time, and a larger
	// concurrency would only make worker.New warn about the pool's size.
	for q := range cfg.Queues {
		cfg.Queues[q] = 1
	}
	return NewPGWorker(t, client.PGQueue(), reg, cfg)
}

// isNil reports a nil client, also a nil *jobfence.Client in the
// interface.
func isNil(c Client) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// NewPGWorker is NewWorker for the layer below the jobfence.Client: it
// returns a Worker running reg's handlers on client with WorkerConfig(cfg)
// (Queues defaulting to one slot of the default queue). It fails t when
// worker.New refuses the configuration.
func NewPGWorker(t TestingT, client *pgqueue.Client, reg *worker.Registry, cfg worker.Config) *Worker {
	t.Helper()
	if len(cfg.Queues) == 0 {
		// It runs one job at a time; a larger concurrency would only make
		// worker.New warn about the pool's size.
		cfg.Queues = map[string]int{queue.DefaultQueue: 1}
	}
	w, err := worker.New(client, reg, WorkerConfig(cfg))
	if err != nil {
		t.Fatalf("jobfencetest: new worker: %v", err)
		return nil
	}
	return &Worker{client: client, w: w}
}

// Result is what became of a job that Work or WorkNext ran.
type Result struct {
	// Job is the job as stored after the attempt: State says completed,
	// retryable, available (snoozed or put back), cancelled or discarded;
	// Errors holds the recorded errors.
	Job *queue.Job
	// Outcome is the outcome the worker recorded under the claim's fence
	// (a retry of a job out of attempts leaves it discarded: see
	// Job.State).
	Outcome queue.Outcome
	// Err is the handler's error as it returned it, so errors.Is and
	// errors.As work; nil when the job completed.
	Err error
	// Delay is how long a retried or snoozed job waits to run again.
	Delay time.Duration
	// Stale reports that the outcome changed nothing because the job was
	// no longer this claim's (see worker.Ran).
	Stale bool
	// Deleted reports that the completion deleted the job, as it asked
	// (queue.InsertOpts.DeleteOnComplete): Job is then the job as claimed,
	// with State completed.
	Deleted bool
}

// Work enqueues args with opts (nil for the defaults) and runs that job
// through the worker's own execution path: a claim under a fence, the
// handler with middleware and timeout (a worker.AddTx handler in its
// transaction, completed under the fence in it), and the outcome recorded
// under the fence. It returns the outcome and the stored job. It fails t
// when the job cannot be enqueued, is not the next ready job of its queue
// (another job would be claimed first), or is scheduled in the future.
func Work[T queue.Args](ctx context.Context, t TestingT, w *Worker, args T, opts *queue.InsertOpts) *Result {
	t.Helper()
	// opts over the args type's own defaults, as the insert takes them.
	o := queue.OptsOf(args, opts)
	q := queue.DefaultQueue
	if o.Queue != "" {
		q = o.Queue
	}
	if o.ScheduledAt.After(time.Now()) {
		t.Fatalf("jobfencetest: Work: ScheduledAt %s is in the future; Work runs a job that is ready now", o.ScheduledAt)
		return nil
	}
	if !w.noneReady(ctx, t, "Work", q, "the one Work enqueues", "or give Work another queue in opts") {
		return nil
	}
	res, err := w.client.Insert(ctx, args, opts)
	if err != nil {
		t.Fatalf("jobfencetest: Work: enqueue %s: %v", args.Kind(), err)
		return nil
	}
	if !res.Inserted {
		t.Fatalf("jobfencetest: Work: job %d already holds unique key %q; nothing was enqueued", res.ID, o.UniqueKey)
		return nil
	}
	r := w.WorkNext(ctx, t, q)
	if r == nil {
		return nil
	}
	if r.Job.ID != res.ID {
		t.Fatalf("jobfencetest: Work: ran job %d, not the enqueued job %d", r.Job.ID, res.ID)
		return nil
	}
	return r
}

// noneReady fails t, for caller, when queue q has a ready job that would be
// claimed before the job caller runs (what), and says how to avoid it
// (hint).
func (w *Worker) noneReady(ctx context.Context, t TestingT, caller, q, what, hint string) bool {
	t.Helper()
	ready, err := w.client.List(ctx, pgqueue.ListParams{Queue: q, Limit: maxListed})
	if err != nil {
		t.Fatalf("jobfencetest: %s: %v", caller, err)
		return false
	}
	var before []*queue.Job
	for _, j := range ready {
		if (j.State == queue.StateAvailable || j.State == queue.StateScheduled || j.State == queue.StateRetryable) && !j.ScheduledAt.After(time.Now()) {
			before = append(before, j)
		}
	}
	if len(before) > 0 {
		t.Fatalf("jobfencetest: %s: queue %q already has ready jobs that would be claimed before %s; "+
			"run them with WorkNext, %s: %s", caller, q, what, hint, describeJobs(before))
		return false
	}
	return true
}

// RetryNow runs the retry of r's job at once, as the worker would run it
// at its time: r is a Result whose attempt failed with attempts left (its
// job is retryable, waiting r.Delay, which your RetryPolicy chose). The
// job's next attempt runs through the same path as Work's, so a test of a
// handler that fails and then succeeds needs no RetryPolicy of its own:
//
//	r := jobfencetest.Work(ctx, t, w, Charge{ID: 1}, nil) // fails: OutcomeRetry
//	r = w.RetryNow(ctx, t, r)                             // attempt 2, now
//
// It fails t when the job is not retryable, or when its queue has another
// ready job that would be claimed first.
func (w *Worker) RetryNow(ctx context.Context, t TestingT, r *Result) *Result {
	t.Helper()
	if r == nil || r.Job == nil {
		t.Fatalf("jobfencetest: RetryNow: no result to retry")
		return nil
	}
	job, err := w.client.Get(ctx, r.Job.ID)
	if err != nil {
		t.Fatalf("jobfencetest: RetryNow: read job %d: %v", r.Job.ID, err)
		return nil
	}
	if job.State != queue.StateRetryable {
		t.Fatalf("jobfencetest: RetryNow: job %d (%s) is %s, not retryable: only an attempt that failed with attempts left has a retry to run",
			job.ID, job.Kind, job.State)
		return nil
	}
	if !w.noneReady(ctx, t, "RetryNow", job.Queue, fmt.Sprintf("the retry of job %d", job.ID), "or retry it after them") {
		return nil
	}
	// Retry makes it available now; it has attempts left, so it gets none
	// added.
	if err := w.client.Retry(ctx, job.ID); err != nil {
		t.Fatalf("jobfencetest: RetryNow: %v", err)
		return nil
	}
	next := w.WorkNext(ctx, t, job.Queue)
	if next == nil {
		return nil
	}
	if next.Job.ID != job.ID {
		t.Fatalf("jobfencetest: RetryNow: ran job %d, not job %d's retry", next.Job.ID, job.ID)
		return nil
	}
	return next
}

// WorkNext runs the next ready job of queue q, such as one your code
// enqueued, as Work does. It fails t when q has no ready job.
func (w *Worker) WorkNext(ctx context.Context, t TestingT, q string) *Result {
	t.Helper()
	ran, err := w.w.RunOne(ctx, q)
	if errors.Is(err, worker.ErrNoJob) {
		t.Fatalf("jobfencetest: no job ready to run in queue %q", q)
		return nil
	}
	if err != nil {
		t.Fatalf("jobfencetest: run a job of queue %q: %v", q, err)
		return nil
	}
	return w.result(ctx, t, ran)
}

// result reads ran's job back after its attempt.
func (w *Worker) result(ctx context.Context, t TestingT, ran *worker.Ran) *Result {
	t.Helper()
	job, err := w.client.Get(ctx, ran.Job.ID)
	if errors.Is(err, queue.ErrJobNotFound) && ran.Outcome == queue.OutcomeComplete && !ran.Stale {
		// Its completion deleted it (DeleteOnComplete).
		done := *ran.Job
		done.State = queue.StateCompleted
		return &Result{Job: &done, Outcome: ran.Outcome, Delay: ran.Delay, Deleted: true}
	}
	if err != nil {
		t.Fatalf("jobfencetest: read job %d back: %v", ran.Job.ID, err)
		return nil
	}
	return &Result{Job: job, Outcome: ran.Outcome, Err: ran.Err, Delay: ran.Delay, Stale: ran.Stale}
}

// maxDrained bounds Drain: a handler that snoozes for no time keeps its
// job ready for ever.
const maxDrained = 10000

// Drain runs the ready jobs of queue q one by one, as WorkNext does, until
// none is ready (jobs enqueued by the handlers included; retries and
// snoozes wait for their time), and returns what became of each, in
// order. It fails t after 10,000 jobs.
//
// Limited jobs (a Limit governs their queue or kind) run as the limit
// grants them: before each job, Drain hands the free slots to the waiting
// jobs, oldest first, as a started worker does, so under a Concurrency
// limit they all run, one after the other, and a Sequence runs in insert
// order. It does not wait for a slot: a job over a Rate within its Period,
// or behind a Sequence's failed job that holds its slot, stays limited,
// and Drain returns without it.
func (w *Worker) Drain(ctx context.Context, t TestingT, q string) []*Result {
	t.Helper()
	var out []*Result
	for len(out) < maxDrained {
		ran, err := w.w.RunOne(ctx, q)
		if errors.Is(err, worker.ErrNoJob) {
			return out
		}
		if err != nil {
			t.Fatalf("jobfencetest: drain queue %q: %v", q, err)
			return out
		}
		r := w.result(ctx, t, ran)
		if r == nil {
			return out
		}
		out = append(out, r)
	}
	t.Fatalf("jobfencetest: drain queue %q: still jobs ready after %d; does a handler snooze for no time?", q, maxDrained)
	return out
}

// String describes r in one line, for test failure messages.
func (r *Result) String() string {
	s := fmt.Sprintf("job %d (%s): outcome %s, state %s", r.Job.ID, r.Job.Kind, r.Outcome, r.Job.State)
	if r.Err != nil {
		s += fmt.Sprintf(", error %q", r.Err)
	}
	if r.Stale {
		s += ", stale"
	}
	return s
}
