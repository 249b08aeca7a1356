package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// ErrPutBackLimit is the error, wrapping the last put-back's cause, of an
// attempt spent because its job had been put back queue.PutBackLimit
// times in a row.
var ErrPutBackLimit = errors.New("jobfence: put back too many times in a row; the attempt is spent")

// OutageChecker is implemented by a TxBackend that can tell whether a
// transactional handler whose database connection closed under it lost it
// to an outage or ended it itself. Without one, every closed connection
// is taken for an outage; either way, put-backs in a row are bounded
// (queue.PutBackLimit).
type OutageChecker interface {
	// Outage reports whether job's transaction, which failed with err when
	// its connection closed, was ended by an outage: the database server
	// restarted since the job was claimed, or cannot be reached now. It
	// reports false when the server stayed up: the session ended because
	// of the handler (it outran a bound of its transaction, or its backend
	// was terminated or died). ctx bounds the check; a check that cannot
	// reach the server reports an outage.
	Outage(ctx context.Context, job *queue.Job, err error) bool
}

// maxOutageCheck bounds the check of an outage: a server that does not
// answer by then counts as unreachable.
const maxOutageCheck = 5 * time.Second

// txFailed says whose failure err is: the transaction of job's handler
// failed with it after it began. A connection that is still open means the
// database answered: err is the handler's (a lock wait that outran the
// lease's lock_timeout included). A closed one is an outage's, and
// returned as a *connError, only if the backend finds the server
// restarted or unreachable: a session that the handler's own doing ended
// (idle past its lease, its backend terminated) spends the attempt like
// any failure, or its job would loop without ever running out of them.
func (w *Worker) txFailed(ctx context.Context, tx pgx.Tx, job *queue.Job, err error) error {
	if !tx.Conn().IsClosed() || ctx.Err() != nil {
		// An ended context (a timeout, a lost lease, Stop) closes the
		// connection itself: its cause decides the outcome.
		return err
	}
	oc, ok := w.backend.(OutageChecker)
	if !ok {
		return &connError{err: err, ran: true}
	}
	// The handler's context may be ending (a commit runs past it); the
	// check is the worker's own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(w.cfg.Lease, maxOutageCheck))
	defer cancel()
	if oc.Outage(cctx, job, err) {
		return &connError{err: err, ran: true}
	}
	return fmt.Errorf("%w (the database stayed up: the transaction's own session ended)", err)
}

// putBack puts back a job whose handler ran but was cut short by something
// that is not its failure, delay from now, recording why on the job. The
// queue.PutBackLimit-th put-back in a row spends the attempt instead, so a
// job that keeps ending this way runs out of attempts after all.
func (w *Worker) putBack(ctx context.Context, job *queue.Job, r *running, delay time.Duration, why error) {
	n := queue.PutBacksInARow(job.Errors) + 1
	if n < queue.PutBackLimit {
		w.stats.snoozed.Add(1)
		err := fmt.Errorf("%w; put back without spending the attempt (%d in a row; at %d the attempt is spent)", why, n, queue.PutBackLimit)
		w.reportRun(job, r, queue.OutcomeSnooze, delay, err, "", n)
		return
	}
	w.logJob(ctx, slog.LevelWarn, "jobfence: job put back too many times in a row; the attempt is spent", job,
		slog.Int("put_backs", n), slog.Any("err", why))
	if job.Attempt >= job.MaxAttempts {
		w.stats.discarded.Add(1)
	} else {
		w.stats.retried.Add(1)
	}
	w.reportRun(job, r, queue.OutcomeRetry, w.retryDelay(job), fmt.Errorf("%w (%d in a row): %w", ErrPutBackLimit, n, why), "", n)
}
