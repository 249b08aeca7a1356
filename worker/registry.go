package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// HandlerOptions tunes one kind's handler.
type HandlerOptions struct {
	// Timeout bounds one attempt of a job that has no Timeout of its own
	// (queue.EnqueueParams.Timeout) and whose args type sets none
	// (queue.InsertOptsProvider); zero takes Config.JobTimeout, negative
	// means no timeout.
	Timeout time.Duration
}

// HandlerFunc is a handler after argument decoding has been bound in: what
// middleware wraps.
type HandlerFunc func(ctx context.Context, job *queue.Job) error

// Middleware wraps every handler of a worker, outermost first.
type Middleware func(next HandlerFunc) HandlerFunc

// handler is a registered kind.
type handler struct {
	kind string
	opts HandlerOptions
	// typeTimeout is the Timeout of the args type's own InsertOpts, read
	// once at registration: it bounds the jobs of the kind inserted
	// without it (a schedule's, an untyped EnqueueParams), as a typed
	// insert stores it on each job.
	typeTimeout time.Duration
	// run decodes the args and calls the user's function.
	run HandlerFunc
	// runTx is set for transactional handlers instead of run.
	runTx func(ctx context.Context, tx pgx.Tx, job *queue.Job) error
	// runBatch is set for batch handlers (AddBatch) instead of run: it
	// returns one result per job. batch holds their options, defaults
	// set.
	runBatch func(ctx context.Context, jobs []*queue.Job) []error
	batch    *BatchOpts
}

// Registry maps job kinds to handlers. Register every kind before the
// worker starts; a Registry is not safe for registration during use.
type Registry struct {
	handlers map[string]*handler
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[string]*handler{}}
}

// Kinds returns the registered kinds.
func (r *Registry) Kinds() []string {
	out := make([]string, 0, len(r.handlers))
	for k := range r.handlers {
		out = append(out, k)
	}
	return out
}

// typeTimeout returns the Timeout that T's InsertOpts sets, if T carries
// its insert defaults.
func typeTimeout[T queue.Args]() time.Duration {
	var zero T
	if p, ok := any(zero).(queue.InsertOptsProvider); ok {
		return p.InsertOpts().Timeout
	}
	return 0
}

func kindOf[T queue.Args]() string {
	var zero T
	if reflect.TypeOf(zero) == nil || reflect.TypeOf(zero).Kind() == reflect.Pointer {
		panic(fmt.Sprintf("jobfence: job args type %T must be a struct type, not a pointer or interface", zero))
	}
	return zero.Kind()
}

func decode[T queue.Args](job *queue.Job) (*Job[T], error) {
	var args T
	if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
		return nil, fmt.Errorf("%w into %T: %v", ErrDecodeArgs, args, err)
	}
	return &Job[T]{Job: job, Args: args}, nil
}

func (r *Registry) add(h *handler) {
	if _, dup := r.handlers[h.kind]; dup {
		panic(fmt.Sprintf("jobfence: a handler for kind %q is already registered", h.kind))
	}
	r.handlers[h.kind] = h
}

// Add registers fn as the handler of T's kind. It panics if the kind is
// registered already, as http.Handle does for a pattern: that is a
// programming error, found at start.
func Add[T queue.Args](r *Registry, fn func(ctx context.Context, job *Job[T]) error, opts ...HandlerOptions) {
	h := &handler{kind: kindOf[T](), typeTimeout: typeTimeout[T]()}
	if len(opts) > 0 {
		h.opts = opts[0]
	}
	h.run = func(ctx context.Context, job *queue.Job) error {
		j, err := decode[T](job)
		if err != nil {
			return err
		}
		return fn(ctx, j)
	}
	r.add(h)
}

// AddTx registers fn as the transactional handler of T's kind: fn's writes
// through tx and the job's fenced completion commit in one transaction. If
// the worker lost the job meanwhile (its fence is stale), the transaction
// rolls back whole and none of fn's writes take effect. If fn returns an
// error the transaction rolls back and the job is retried. The backend must
// implement TxBackend (pgqueue does).
func AddTx[T queue.Args](r *Registry, fn func(ctx context.Context, tx pgx.Tx, job *Job[T]) error, opts ...HandlerOptions) {
	h := &handler{kind: kindOf[T](), typeTimeout: typeTimeout[T]()}
	if len(opts) > 0 {
		h.opts = opts[0]
	}
	h.runTx = func(ctx context.Context, tx pgx.Tx, job *queue.Job) error {
		j, err := decode[T](job)
		if err != nil {
			return err
		}
		return fn(ctx, tx, j)
	}
	r.add(h)
}

// TxBackend is a backend whose jobs can complete inside a database
// transaction, for AddTx handlers.
type TxBackend interface {
	queue.Backend
	// BeginTx starts a transaction for a handler whose claim holds a lease
	// of lease. The backend must end the transaction, and release its
	// locks, if it sits idle for longer than the lease (a holder frozen
	// mid-handler), and FinishTx must bound the rest of it by the lease
	// the job has left, so that no frozen holder pins the job.
	BeginTx(ctx context.Context, lease time.Duration) (pgx.Tx, error)
	// FinishTx completes the job under its fence inside tx (f.Outcome is
	// OutcomeComplete), storing f.Output and releasing a workflow task's
	// dependents with it, or returns an error that is errors.Is
	// queue.ErrStaleFence when the fence is stale.
	FinishTx(ctx context.Context, tx pgx.Tx, f queue.Finish) error
}
