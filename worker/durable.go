package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// Durable jobs (docs/durable.md): a handler's steps are recorded as they
// succeed, under the attempt's fence, and a later attempt of the job
// replays them instead of running them again; Sleep and AwaitSignal end
// the attempt without spending it and resume the job at the next step.

// StepBackend is implemented by backends that record a job's durable
// steps (pgqueue). Every write applies only under the lease's fence and
// returns a *queue.StaleFenceError when the fence is lost.
type StepBackend interface {
	// Steps returns the steps recorded for job id, by name, and the
	// backend's clock.
	Steps(ctx context.Context, id int64) (map[string]json.RawMessage, time.Time, error)
	// RecordStep records output as step name of the job l leases, in tx
	// when tx is not nil (a transactional handler's), and returns what is
	// recorded: output, or what an earlier record of the step stored.
	RecordStep(ctx context.Context, tx pgx.Tx, l queue.Lease, name string, output []byte) (json.RawMessage, error)
	// Timer records timer name, ending at until or, if until is zero, d
	// from now by the backend's clock, unless it is recorded already, and
	// returns its end (the recorded one's) and the backend's clock.
	Timer(ctx context.Context, l queue.Lease, name string, d time.Duration, until time.Time) (end, now time.Time, err error)
	// AwaitSignal takes, for the wait recorded as step name, the oldest
	// undelivered signal, recording {"signal": payload} as the step, or,
	// once the wait's timer (timeout from its first call) has ended,
	// records {"timeout": true}; it returns what it recorded (nil if
	// nothing: the wait goes on), the timer's end and the backend's clock.
	AwaitSignal(ctx context.Context, l queue.Lease, name, signal string, timeout time.Duration) (out json.RawMessage, until, now time.Time, err error)
}

// SignalWaker is implemented by backends that can tell a worker that a
// signal was sent in a caller's transaction (pgqueue's SignalTx), so that
// its promoter makes the wait that awaits it ready at once rather than at
// its next pass.
type SignalWaker interface {
	// Signalled returns a channel that receives a value when such a
	// signal may be there; nil if the backend cannot tell.
	Signalled(ctx context.Context) (<-chan struct{}, error)
}

// ErrNotDurable is wrapped by the error of Step, Sleep and AwaitSignal
// when the job's backend records no steps (kafkaqueue).
var ErrNotDurable = errors.New("jobfence: the job's backend records no durable steps")

// ErrBadStepName is wrapped by the error of Step for a name that is
// empty, longer than 200 bytes, or reserved (it starts with "jobfence:").
var ErrBadStepName = errors.New("jobfence: bad step name")

// ErrSuspended is wrapped by the error that Sleep and AwaitSignal return
// when the job suspends: the handler must return it (or any error: the
// job suspends whatever its handler returns). Every step called after it
// in the same attempt returns it too, without running.
var ErrSuspended = errors.New("jobfence: the job suspends")

// ErrSuspendInTx is wrapped by the error of Sleep and AwaitSignal in a
// transactional handler (AddTx): suspending ends the attempt, which would
// roll back the handler's transaction and the steps recorded in it.
var ErrSuspendInTx = errors.New("jobfence: Sleep and AwaitSignal cannot suspend a transactional handler")

// ErrSignalTimeout is wrapped by AwaitSignal's error when its timeout
// passed with no signal. The timeout is recorded as the wait's outcome:
// a later attempt gets the same error.
var ErrSignalTimeout = errors.New("jobfence: no signal arrived before the wait's timeout")

// reserved prefixes the names of the steps that Sleep and AwaitSignal
// record, so that no step of the handler's takes one.
const reserved = "jobfence:"

// maxStepName bounds a step's name, in bytes.
const maxStepName = 200

// durable is a running job's steps: those recorded by earlier attempts,
// read at the first step of an attempt that can have some, and those this
// attempt records.
type durable struct {
	mu     sync.Mutex
	loaded bool
	steps  map[string]json.RawMessage
	// dbNow is the backend's clock when the steps were read (or a timer
	// recorded), at the local time readAt.
	dbNow, readAt time.Time
	// seen counts the calls of each name in this attempt: the n-th call
	// of a name is step "name#n" (the first is "name"), so that a loop of
	// steps records one per turn and replays them in order.
	seen map[string]int
	// suspended is set once Sleep or AwaitSignal suspends the job.
	suspended *suspendError
	// tx is an AddTx handler's transaction, which steps record in.
	tx pgx.Tx
}

// suspendError is what Sleep and AwaitSignal return when the job
// suspends: until d has passed, by the backend's clock, or a signal
// awaited arrives.
type suspendError struct {
	d     time.Duration
	await string
}

func (e *suspendError) Error() string {
	if e.await != "" {
		return fmt.Sprintf("jobfence: the job suspends awaiting signal %q for at most %s", e.await, e.d)
	}
	return fmt.Sprintf("jobfence: the job suspends for %s", e.d)
}

func (e *suspendError) Is(target error) bool { return target == ErrSuspended }

// stepKeyCtx keys a step's own key in its function's context.
type stepKeyCtx struct{}

// durableOf returns the running job's context, its step backend and its
// steps, or the error to return.
func durableOf(ctx context.Context, what string) (*runCtx, StepBackend, error) {
	rc, _ := ctx.Value(runCtxKey{}).(*runCtx)
	if rc == nil {
		return nil, nil, fmt.Errorf("jobfence: %s: %w", what, ErrNotInHandler)
	}
	sb, ok := rc.backend.(StepBackend)
	if !ok {
		return nil, nil, fmt.Errorf("jobfence: %s of job %d: %w", what, rc.r.job.ID, ErrNotDurable)
	}
	return rc, sb, nil
}

// next names the next call of name in this attempt and reads the steps
// earlier attempts recorded, once, if the job can have some: it was
// claimed before (a retry, a rescue, a put-back, a suspension). A job's
// first claim reads nothing: a step then costs its record alone.
func (d *durable) next(ctx context.Context, sb StepBackend, job *queue.Job, name string) (string, error) {
	if d.seen == nil {
		d.seen = map[string]int{}
	}
	d.seen[name]++
	key := name
	if n := d.seen[name]; n > 1 {
		key = name + "#" + strconv.Itoa(n)
	}
	if d.loaded {
		return key, nil
	}
	if len(job.AttemptedBy) > 1 || job.Attempt > 1 {
		steps, now, err := sb.Steps(ctx, job.ID)
		if err != nil {
			d.seen[name]--
			return "", err
		}
		d.steps, d.dbNow, d.readAt = steps, now, time.Now()
	}
	if d.steps == nil {
		d.steps = map[string]json.RawMessage{}
	}
	d.loaded = true
	return key, nil
}

// clock is the backend's clock now, as last read.
func (d *durable) clock() time.Time {
	if d.dbNow.IsZero() {
		return time.Now()
	}
	return d.dbNow.Add(time.Since(d.readAt))
}

// Step runs fn once for the job whose handler's context ctx is, across
// all its attempts: the first run that succeeds records its result (as
// JSON, under the attempt's fence), and every later attempt of the job
// (a retry, a rescue after a crash, a resumption after Sleep or
// AwaitSignal) returns the recorded result without running fn. The n-th
// call of a name in an attempt is a step of its own ("name", "name#2",
// ...), so a handler's steps must come in the same order on every
// attempt. fn's error is returned and nothing is recorded: the step runs
// again on the next attempt.
//
// A record by an attempt that lost its claim fails with an error wrapping
// queue.ErrStaleFence and records nothing, so two attempts never both
// record a step. fn can run more than once (an attempt that crashed after
// fn and before its record): an outside call in it should pass StepKey's
// idempotency key. In a transactional handler (AddTx) the step records in
// the handler's transaction and commits with its completion.
//
// The result must round-trip through encoding/json; it is bounded by
// Config.MaxOutputBytes. The cost of a step is its record, one round
// trip; an attempt of a job that ran before also reads the job's steps
// once, at its first step.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if name == "" || len(name) > maxStepName || strings.HasPrefix(name, reserved) {
		return zero, fmt.Errorf("jobfence: step %q: %w: a step's name must be 1 to %d bytes and not start with %q", name, ErrBadStepName, maxStepName, reserved)
	}
	return step(ctx, name, fn)
}

// SystemStep is Step for jobfence's own packages (workflow.StartChild
// records the child workflow it starts as one): its name, "jobfence:"
// followed by name, is reserved, so that no step of a handler's takes it.
func SystemStep[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if name == "" || len(reserved+name) > maxStepName {
		return zero, fmt.Errorf("jobfence: step %q: %w: a system step's name must be 1 to %d bytes", name, ErrBadStepName, maxStepName-len(reserved))
	}
	return step(ctx, reserved+name, fn)
}

func step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	rc, sb, err := durableOf(ctx, "step "+strconv.Quote(name))
	if err != nil {
		return zero, err
	}
	job, d := rc.r.job, &rc.durable
	d.mu.Lock()
	if d.suspended != nil {
		d.mu.Unlock()
		return zero, d.suspended
	}
	key, err := d.next(ctx, sb, job, name)
	if err != nil {
		d.mu.Unlock()
		return zero, fmt.Errorf("jobfence: step %q of job %d: %w", name, job.ID, err)
	}
	recorded, ok := d.steps[key]
	d.mu.Unlock()
	if ok {
		rc.replayed.Add(1)
		var v T
		if err := json.Unmarshal(recorded, &v); err != nil {
			return zero, fmt.Errorf("jobfence: step %q of job %d: its recorded result does not decode into %T (did the type change?): %w", key, job.ID, v, err)
		}
		return v, nil
	}
	v, err := fn(context.WithValue(ctx, stepKeyCtx{}, job.IdempotencyKey()+"/"+key))
	if err != nil {
		return zero, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("jobfence: step %q of job %d: its result does not encode as JSON: %w", key, job.ID, err)
	}
	if len(b) > rc.max {
		return zero, fmt.Errorf("%w: step %q of job %d returned %d bytes of JSON, more than the %d of Config.MaxOutputBytes; return a reference (a key, a URL) to something stored elsewhere",
			ErrOutputTooLarge, key, job.ID, len(b), rc.max)
	}
	d.mu.Lock()
	tx := d.tx
	d.mu.Unlock()
	stored, err := sb.RecordStep(ctx, tx, job.Lease(), key, b)
	if err != nil {
		return zero, fmt.Errorf("jobfence: step %q of job %d: %w", key, job.ID, err)
	}
	d.mu.Lock()
	d.steps[key] = stored
	d.mu.Unlock()
	rc.recorded.Add(1)
	if string(stored) != string(b) {
		// An earlier record of the step: go on with it, as a later
		// attempt would.
		var w T
		if err := json.Unmarshal(stored, &w); err != nil {
			return zero, fmt.Errorf("jobfence: step %q of job %d: its recorded result does not decode into %T: %w", key, job.ID, w, err)
		}
		return w, nil
	}
	return v, nil
}

// StepKey returns, inside a step's function, the step's idempotency key:
// the job's (queue.Job.IdempotencyKey) and the step's name, the same on
// every run of the step and different for every step. Pass it to an
// outside call (a payment provider's Idempotency-Key) so that a step run
// again after a crash, before its record, takes effect once. It returns
// "" outside a step.
func StepKey(ctx context.Context) string {
	k, _ := ctx.Value(stepKeyCtx{}).(string)
	return k
}

// Sleep suspends the job whose handler's context ctx is for d, by the
// database's clock: it records the sleep's end as a step and returns an
// error wrapping ErrSuspended, which the handler returns; the attempt ends
// without being spent, the worker's slot is free, and a limit slot is
// kept only where the limit holds slots through retries (a sequence
// keeps its turn: docs/states.md, "suspend"). Once d has passed the job
// runs again: its recorded steps return their results, and this Sleep
// returns nil. It works for days, across deploys and restarts (within
// the job's deadline, if it has one: a wake past it discards the job).
// d <= 0 returns nil at once.
func Sleep(ctx context.Context, d time.Duration) error {
	return sleep(ctx, d, time.Time{})
}

// SleepUntil is Sleep until t.
func SleepUntil(ctx context.Context, t time.Time) error {
	return sleep(ctx, 0, t)
}

func sleep(ctx context.Context, d time.Duration, until time.Time) error {
	rc, sb, err := durableOf(ctx, "sleep")
	if err != nil {
		return err
	}
	job, dur := rc.r.job, &rc.durable
	dur.mu.Lock()
	defer dur.mu.Unlock()
	if dur.suspended != nil {
		return dur.suspended
	}
	if dur.tx != nil {
		return fmt.Errorf("jobfence: sleep of job %d: %w: it ends the attempt, which would roll back the handler's transaction; sleep in a handler added with AddHandler", job.ID, ErrSuspendInTx)
	}
	key, err := dur.next(ctx, sb, job, reserved+"sleep")
	if err != nil {
		return fmt.Errorf("jobfence: sleep of job %d: %w", job.ID, err)
	}
	if until.IsZero() && d <= 0 {
		return nil
	}
	var end time.Time
	if recorded, ok := dur.steps[key]; ok {
		var t struct {
			Until time.Time `json:"until"`
		}
		if err := json.Unmarshal(recorded, &t); err != nil {
			return fmt.Errorf("jobfence: sleep %q of job %d: %w", key, job.ID, err)
		}
		end = t.Until
	} else {
		var now time.Time
		if end, now, err = sb.Timer(ctx, job.Lease(), key, d, until); err != nil {
			return fmt.Errorf("jobfence: sleep of job %d: %w", job.ID, err)
		}
		dur.dbNow, dur.readAt = now, time.Now()
		dur.steps[key], _ = json.Marshal(map[string]time.Time{"until": end})
	}
	left := end.Sub(dur.clock())
	if left <= 0 {
		return nil
	}
	dur.suspended = &suspendError{d: left}
	return dur.suspended
}

// AwaitSignal waits, inside the handler of the job ctx is of, for a
// signal name sent to the job (Client.Signal), for timeout at most from
// the wait's first call, and returns its payload decoded into T. A
// signal sent before the wait waits for it; each signal is delivered to
// one wait, oldest first. With no signal there yet, the job suspends
// (the error wraps ErrSuspended; the handler returns it), holding no
// worker's slot (and a limit's slot only where the limit holds slots
// through retries), and runs again when the signal arrives or the timeout
// passes: its recorded steps return their results, and this wait returns
// the payload, or an error wrapping ErrSignalTimeout. Both are recorded
// as the wait's step, so every later attempt sees the same. The n-th wait
// for a name in an attempt is a wait of its own.
func AwaitSignal[T any](ctx context.Context, name string, timeout time.Duration) (T, error) {
	var zero T
	rc, sb, err := durableOf(ctx, "await signal "+strconv.Quote(name))
	if err != nil {
		return zero, err
	}
	job, dur := rc.r.job, &rc.durable
	if name == "" || len(name) > maxStepName {
		return zero, fmt.Errorf("jobfence: await signal of job %d: %w: a signal's name must be 1 to %d bytes", job.ID, ErrBadStepName, maxStepName)
	}
	if timeout <= 0 {
		return zero, fmt.Errorf("jobfence: await signal %q of job %d: the timeout is %s; give the wait a bound (days are fine)", name, job.ID, timeout)
	}
	dur.mu.Lock()
	defer dur.mu.Unlock()
	if dur.suspended != nil {
		return zero, dur.suspended
	}
	if dur.tx != nil {
		return zero, fmt.Errorf("jobfence: await signal %q of job %d: %w: it ends the attempt, which would roll back the handler's transaction; wait in a handler added with AddHandler", name, job.ID, ErrSuspendInTx)
	}
	key, err := dur.next(ctx, sb, job, reserved+"signal:"+name)
	if err != nil {
		return zero, fmt.Errorf("jobfence: await signal %q of job %d: %w", name, job.ID, err)
	}
	out, ok := dur.steps[key]
	if !ok {
		var until, now time.Time
		if out, until, now, err = sb.AwaitSignal(ctx, job.Lease(), key, name, timeout); err != nil {
			return zero, fmt.Errorf("jobfence: await signal %q of job %d: %w", name, job.ID, err)
		}
		dur.dbNow, dur.readAt = now, time.Now()
		if out == nil {
			dur.suspended = &suspendError{d: max(until.Sub(now), time.Microsecond), await: name}
			return zero, dur.suspended
		}
		dur.steps[key] = out
		rc.recorded.Add(1)
	} else {
		rc.replayed.Add(1)
	}
	var got struct {
		Signal  json.RawMessage `json:"signal"`
		Timeout bool            `json:"timeout"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		return zero, fmt.Errorf("jobfence: await signal %q of job %d: %w", name, job.ID, err)
	}
	if got.Timeout {
		return zero, fmt.Errorf("jobfence: await signal %q of job %d: %w (%s)", name, job.ID, ErrSignalTimeout, timeout)
	}
	var v T
	if err := json.Unmarshal(got.Signal, &v); err != nil {
		return zero, fmt.Errorf("jobfence: await signal %q of job %d: its payload does not decode into %T: %w", name, job.ID, v, err)
	}
	return v, nil
}

// suspension returns the suspension Sleep or AwaitSignal asked for in
// r's attempt, nil if none.
func (r *running) suspension() *suspendError {
	if r.rc == nil {
		return nil
	}
	r.rc.durable.mu.Lock()
	defer r.rc.durable.mu.Unlock()
	return r.rc.durable.suspended
}
