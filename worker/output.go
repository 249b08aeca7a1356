package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jobfence/jobfence/queue"
)

// ErrOutputTooLarge is wrapped by RecordOutput's error for an output whose
// JSON is longer than Config.MaxOutputBytes. Nothing is recorded: the
// handler may record something smaller, or fail.
var ErrOutputTooLarge = errors.New("jobfence: job output too large")

// ErrNotInHandler is returned by RecordOutput, and wrapped by other helpers that
// need the running job, when the context is not a handler's.
var ErrNotInHandler = errors.New("jobfence: not a job handler's context")

// runCtxKey keys the running job in its handler's context.
type runCtxKey struct{}

// runCtx is what a handler's context carries: the job, where its output
// goes, and the backend that runs it.
type runCtx struct {
	r       *running
	w       *Worker
	backend queue.Backend
	max     int
	output  atomic.Pointer[[]byte]
	// durable holds the job's steps (Step, Sleep, AwaitSignal);
	// recorded and replayed are the worker's counters of them.
	durable            durable
	recorded, replayed *atomic.Int64
	// progress is set by the handler's first Progress call.
	progress atomic.Pointer[progress]
	// logger is set by the handler's first Logger call.
	logger atomic.Pointer[slog.Logger]
}

// RecordOutput records v, encoded as JSON, as the output of the job whose
// handler's context ctx is. The output is stored with the job's fenced
// completion, in the same statement (or, for an AddTx handler, the same
// transaction): an attempt that lost its claim stores nothing, and an
// attempt that fails stores nothing either. Calling it again replaces what
// was recorded. It returns an error wrapping ErrOutputTooLarge when the
// JSON is longer than Config.MaxOutputBytes, ErrNotInHandler outside a handler,
// and json.Marshal's error when v does not encode.
//
// Read the output back with pgqueue's Get (queue.Job.Output), `jobfence
// jobs show`, the dashboard's job page, or, from a workflow task that
// depends on the job, workflow.Output.
func RecordOutput(ctx context.Context, v any) error {
	rc, _ := ctx.Value(runCtxKey{}).(*runCtx)
	if rc == nil {
		return fmt.Errorf("jobfence: record output: %w", ErrNotInHandler)
	}
	return rc.record(v)
}

// record stores v's JSON as the output of rc's job.
func (rc *runCtx) record(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("jobfence: record output of job %d: %w", rc.r.job.ID, err)
	}
	if len(b) > rc.max {
		return fmt.Errorf("%w: job %d's output is %d bytes of JSON, more than the %d of Config.MaxOutputBytes; record a reference (a key, a URL) to something stored elsewhere",
			ErrOutputTooLarge, rc.r.job.ID, len(b), rc.max)
	}
	rc.output.Store(&b)
	return nil
}

// JobFromContext returns the job whose handler's context ctx is, or nil
// outside a handler. Middleware and helpers (package workflow) use it.
func JobFromContext(ctx context.Context) *queue.Job {
	if rc, _ := ctx.Value(runCtxKey{}).(*runCtx); rc != nil {
		return rc.r.job
	}
	return nil
}

// BackendFromContext returns the backend that runs the job whose handler's
// context ctx is, or nil outside a handler: helpers that read what other
// jobs stored (workflow.Output) go through it.
func BackendFromContext(ctx context.Context) queue.Backend {
	if rc, _ := ctx.Value(runCtxKey{}).(*runCtx); rc != nil {
		return rc.backend
	}
	return nil
}

// recordedOutput returns what the handler recorded, nil if nothing.
func (r *running) recordedOutput() []byte {
	if r.rc == nil {
		return nil
	}
	if p := r.rc.output.Load(); p != nil {
		return *p
	}
	return nil
}
