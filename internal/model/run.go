package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// opTimeout bounds every call of an operation. A call that runs into it
// waited on something it must not wait on unbounded (a lock a paused
// caller holds): that is a violation, not a slow machine.
const opTimeout = 5 * time.Second

// limitSettle is how long SetLimit waits for the transactions open when
// it stored a limit (an append left open among them): bounded by design,
// and well within opTimeout.
const limitSettle = time.Second

// priorityAging is the client's pgqueue.Config.PriorityAging: short, so
// that the promoter's passes (OpPromote) age the fair queue's jobs that
// wait available within a run.
const priorityAging = 200 * time.Millisecond

// Violation is a broken invariant: the step and operation at which it was
// seen, the rule, and what was seen.
type Violation struct {
	Step   int
	Op     Op
	Rule   string
	Detail string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("step %d %s: %s: %s", v.Step, v.Op, v.Rule, v.Detail)
}

// Env is where a run happens: URL connects to a fresh migrated schema
// (search_path set); Admin is a pool on it that the run uses for its
// reads and faults, and that no fault terminates.
type Env struct {
	URL   string
	Admin *pgxpool.Pool
	// Skip names rules whose violations are counted (Stats.Skipped) but
	// do not end the run: known defects, set aside to look for others.
	Skip map[string]bool
}

// Result is what a run drove and the first violation it saw, if any.
type Result struct {
	Stats     Stats
	Violation *Violation
}

// runner drives the real system through pgqueue's public API, one
// operation at a time, beside the model.
type runner struct {
	ctx   context.Context
	c     *pgqueue.Client
	pool  *pgxpool.Pool
	admin *pgxpool.Pool
	app   string
	s     *state
	step  int
	op    Op
	v     *Violation
	// tx is the caller's open transaction of an append, and app its task.
	tx    pgx.Tx
	txJob *jobInfo
	txWf  *wfInfo
	skip  map[string]bool
}

var apps atomic.Int64

// Run runs ops against the schema env names, then drains it, checking
// the invariants after every step. A violation ends the run; an error is
// a failure to run at all (no server).
func Run(ctx context.Context, env Env, ops []Op) (Result, error) {
	app := fmt.Sprintf("jobfence-model-%d-%d", time.Now().UnixNano()%1e9, apps.Add(1))
	u, err := url.Parse(env.URL)
	if err != nil {
		return Result{}, fmt.Errorf("model: parse URL: %w", err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return Result{}, fmt.Errorf("model: pool config: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Result{}, fmt.Errorf("model: pool: %w", err)
	}
	defer pool.Close()
	// The client's logs (a paused queue, a wake a fault broke) are the
	// operations' own doing; a violation says what matters.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &runner{ctx: ctx, c: pgqueue.New(pool, pgqueue.Config{Logger: quiet, LimitSettle: limitSettle, PriorityAging: priorityAging}), pool: pool, admin: env.Admin, app: app, s: newState(), skip: env.Skip}
	defer r.c.Close()
	defer func() {
		if r.tx != nil {
			_ = r.tx.Rollback(context.Background())
		}
	}()
	for _, q := range world {
		if q.limit != nil {
			if err := r.c.SetLimit(ctx, *q.limit); err != nil {
				return Result{}, fmt.Errorf("model: set limit %s: %w", q.limit.Name, err)
			}
		}
	}
	for i, op := range ops {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		r.step, r.op = i, op
		r.s.stats.Ops++
		if op.IsFault() {
			r.s.stats.Faults++
		}
		r.exec(op)
		if r.v == nil {
			r.checkStep()
		}
		if r.v == nil {
			r.checkFair()
		}
		if r.v != nil {
			return Result{Stats: r.s.stats, Violation: r.v}, nil
		}
	}
	r.step, r.op = len(ops), Op{Kind: "drain"}
	r.drain()
	return Result{Stats: r.s.stats, Violation: r.v}, nil
}

// fail records the first violation of the run.
func (r *runner) fail(rule, format string, args ...any) {
	if r.skip[rule] {
		r.s.stats.Skipped++
		if r.s.stats.SkippedBy == nil {
			r.s.stats.SkippedBy = map[string]int{}
		}
		r.s.stats.SkippedBy[rule]++
		if r.s.stats.SkippedFirst == nil {
			r.s.stats.SkippedFirst = map[string]string{}
		}
		if _, ok := r.s.stats.SkippedFirst[rule]; !ok {
			r.s.stats.SkippedFirst[rule] = (&Violation{Step: r.step, Op: r.op, Rule: rule, Detail: fmt.Sprintf(format, args...)}).Error()
		}
		return
	}
	if r.v == nil {
		r.v = &Violation{Step: r.step, Op: r.op, Rule: rule, Detail: fmt.Sprintf(format, args...)}
	}
}

// opCtx bounds one call; see opTimeout.
func (r *runner) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, opTimeout)
}

// called judges the error of a call of the real system: nil; a broken
// connection (a terminated backend), tolerated; a call that ran into
// opTimeout, a violation; a server error, a violation unless tolerate
// says it is an expected refusal (a cancel of a finished job).
func (r *runner) called(what string, err error, tolerate func(error) bool) bool {
	if err == nil {
		return true
	}
	if r.ctx.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		r.fail("bounded wait", "%s waited %v: %v", what, opTimeout, err)
		return false
	}
	if tolerate != nil && tolerate(err) || connLost(err) {
		r.s.stats.Tolerated++
		return false
	}
	r.fail("error", "%s: %v", what, err)
	return false
}

// connLost reports whether err may be a session's end rather than the
// server's answer: its backend terminated (57P01), or an error that is no
// server error at all (a connection closed under the call; pgqueue's own
// refusals, such as a workflow that stopped growing, look the same and
// are tolerated with them). A stale fence is judged by the caller.
func connLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P01"
	}
	return !errors.Is(err, queue.ErrStaleFence)
}

func anyErr(error) bool { return true }

// exec runs one operation.
func (r *runner) exec(op Op) {
	s := r.s
	switch op.Kind {
	case OpInsert:
		r.insert(op)
	case OpWorkflow:
		r.workflow(op)
	case OpAppendOpen:
		r.appendOpen(op)
	case OpAppendEnd:
		r.appendEnd(op.Flag)
	case OpClaim:
		r.claim(op.Owner%owners, world[op.Queue%len(world)].name, max(1, op.N))
	case OpBatch:
		r.batchOp(op)
	case OpComplete, OpFail, OpDiscard, OpSnooze, OpPutBack, OpRateLimited:
		claims, by := s.liveClaims()
		if len(claims) == 0 {
			return
		}
		i := op.Pick % len(claims)
		out := map[Kind]queue.Outcome{OpComplete: queue.OutcomeComplete, OpFail: queue.OutcomeRetry, OpDiscard: queue.OutcomeDiscard,
			OpSnooze: queue.OutcomeSnooze, OpPutBack: queue.OutcomeSnooze, OpRateLimited: queue.OutcomeSnooze}[op.Kind]
		via := batch
		if op.Kind == OpPutBack {
			via = putBack
		} else if op.Kind == OpRateLimited {
			via = rateLimited
		} else if op.Flag {
			via = inTx
		}
		r.finish(by[i], claims[i], out, time.Duration(op.Ms)*time.Millisecond, via)
	case OpCancel, OpRetry, OpRetryForce:
		r.admin3(op)
	case OpStep:
		r.stepOp(op)
	case OpAwait:
		r.awaitOp(op)
		r.checkSignals()
	case OpSignal:
		r.signalOp(op)
		r.checkSignals()
	case OpPromote:
		r.promote()
	case OpGrant:
		ctx, cancel := r.opCtx()
		_, err := r.c.GrantWaiting(ctx, 1000)
		cancel()
		r.called("GrantWaiting", err, nil)
	case OpRescue:
		r.rescue()
	case OpHeartbeat:
		r.heartbeat()
	case OpSleep:
		time.Sleep(time.Duration(op.Ms) * time.Millisecond)
	case OpSetLimit, OpDeleteLimit:
		r.limitChange(op)
	case OpPause, OpResume:
		q := world[op.Queue%len(world)].name
		ctx, cancel := r.opCtx()
		defer cancel()
		if op.Kind == OpPause {
			if r.called("PauseQueue", r.c.PauseQueue(ctx, q, "model"), nil) {
				s.paused[q] = true
			}
		} else if r.called("ResumeQueue", r.c.ResumeQueue(ctx, q, "model"), nil) {
			delete(s.paused, q)
		}
	case OpExpire:
		all := r.allClaims()
		if len(all) == 0 {
			return
		}
		j := all[op.Pick%len(all)]
		r.expire(j.ID, j.Fence)
	case OpFreeze:
		s.owners[op.Owner%owners].frozen = true
	case OpThaw:
		o := s.owners[op.Owner%owners]
		if !o.frozen {
			return
		}
		o.frozen = false
		// A thawed worker writes the outcomes its handlers reached while
		// it was stopped: the claims it lost must refuse them.
		for _, j := range append([]*queue.Job(nil), o.claims...) {
			// A step its handler ran while it was stopped: refused if
			// the claim was lost meanwhile.
			r.recordStep(j, "thawed", op.N)
			if r.v != nil {
				return
			}
			r.finish(op.Owner%owners, j, queue.OutcomeComplete, 0, inTx)
			if r.v != nil {
				return
			}
		}
	case OpKill:
		o := s.owners[op.Owner%owners]
		s.abandoned = append(s.abandoned, o.claims...)
		o.claims, o.frozen = nil, false
	case OpTerminate:
		ctx, cancel := r.opCtx()
		defer cancel()
		_, err := r.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, r.app)
		r.called("terminate", err, nil)
	default:
		r.fail("ops", "unknown operation %q", op.Kind)
	}
}

// allClaims are every claim the model knows of: every owner's, frozen or
// not, and the abandoned ones.
func (r *runner) allClaims() []*queue.Job {
	var all []*queue.Job
	for _, o := range r.s.owners {
		all = append(all, o.claims...)
	}
	return append(all, r.s.abandoned...)
}
